import { z } from 'zod';
import { checkLength, jsonObjectSchema, maskValueSchema, tokenIdsSchema } from './common.js';

const perSampleKeys = [
  'response_lengths',
  'rewards',
  'raw_reward',
  'truncated',
  'sample_indices',
  'rollout_ids',
  'loss_masks',
  'rollout_mask_sums',
] as const;

const optionalPerSampleKeys = [
  'round_number',
  'rollout_log_probs',
  'teacher_log_probs',
  'source_names',
  'total_lengths',
] as const;

/**
 * slime's `train_data` dict: one entry per sample under each key. `loss_masks`, `rollout_log_probs`
 * and `teacher_log_probs` cover the response tokens only (the last `response_lengths[i]` tokens).
 * `rollout_mask_sums` holds each sample's loss denominator (prompt-equal by default).
 */
export const trainBatchSchema = z
  .looseObject({
    tokens: z.array(tokenIdsSchema.min(1)),
    response_lengths: z.array(z.int().nonnegative()),
    rewards: z.array(z.number()),
    raw_reward: z.array(z.number()),
    truncated: z.array(maskValueSchema),
    sample_indices: z.array(z.int()),
    rollout_ids: z.array(z.int()),
    loss_masks: z.array(z.array(maskValueSchema)),
    rollout_mask_sums: z.array(z.number().nonnegative()),
    round_number: z.array(z.int()).optional(),
    rollout_log_probs: z.array(z.array(z.number())).optional(),
    teacher_log_probs: z.array(z.array(z.number())).optional(),
    source_names: z.array(z.string()).optional(),
    total_lengths: z.array(z.int().positive()).optional(),
    rollout_routed_experts: z.array(z.unknown()).optional(),
    metadata: z.array(jsonObjectSchema).optional(),
    multimodal_train_inputs: z.array(z.unknown()).optional(),
  })
  .superRefine((batch, context) => {
    const count = batch.tokens.length;
    for (const key of perSampleKeys) checkLength(context, [key], batch[key].length, count, 'tokens');
    for (const key of optionalPerSampleKeys) {
      const values = batch[key];
      if (values !== undefined) checkLength(context, [key], values.length, count, 'tokens');
    }
    for (let i = 0; i < count; i++) {
      const total = batch.tokens[i]?.length ?? 0;
      const response = batch.response_lengths[i];
      if (response === undefined) break;
      if (response > total) {
        context.addIssue({
          code: 'custom',
          path: ['response_lengths', i],
          message: `${response} exceeds the ${total} tokens of sample ${i}`,
        });
      }
      const mask = batch.loss_masks[i];
      if (mask !== undefined)
        checkLength(context, ['loss_masks', i], mask.length, response, 'response_lengths');
      const logprobs = batch.rollout_log_probs?.[i];
      if (logprobs !== undefined) {
        checkLength(context, ['rollout_log_probs', i], logprobs.length, response, 'response_lengths');
      }
      const totalLength = batch.total_lengths?.[i];
      if (totalLength !== undefined) checkLength(context, ['total_lengths', i], totalLength, total, 'tokens');
    }
  });

/** slime's `train_data` dict. */
export type TrainBatch = z.infer<typeof trainBatchSchema>;
