import { z } from 'zod';
import { parseWire } from '../validation.js';
import { checkLength, jsonObjectSchema, maskValueSchema, tokenIdsSchema } from './common.js';
import { promptSchema } from './prompt.js';

/** slime's `Sample.Status` values. */
export const sampleStatusSchema = z.enum(['pending', 'completed', 'truncated', 'aborted', 'failed']);

/** slime's `Sample.Status` values. */
export type SampleStatus = z.infer<typeof sampleStatusSchema>;

/** Named constants of {@link SampleStatus}. */
export const SampleStatus = {
  PENDING: 'pending',
  COMPLETED: 'completed',
  TRUNCATED: 'truncated',
  ABORTED: 'aborted',
  FAILED: 'failed',
} as const satisfies Record<string, SampleStatus>;

/** Speculative-decoding statistics of a sample. */
export const specInfoSchema = z.looseObject({
  spec_accept_token_num: z.int().nonnegative().default(0),
  spec_draft_token_num: z.int().nonnegative().default(0),
  spec_verify_ct: z.int().nonnegative().default(0),
  completion_token_num: z.int().nonnegative().default(0),
});

/** Prefix-cache statistics of a sample. */
export const prefixCacheInfoSchema = z.looseObject({
  cached_tokens: z.int().nonnegative().default(0),
  total_prompt_tokens: z.int().nonnegative().default(0),
});

/**
 * slime's `Sample`, field for field and with its defaults: parsing `{}` yields a pending, empty
 * sample. Invariants: `response_length <= tokens.length`; `loss_mask` and `rollout_log_probs`, when
 * set, hold exactly `response_length` entries.
 */
export const sampleSchema = z
  .looseObject({
    group_index: z.int().nullable().default(null),
    index: z.int().nullable().default(null),
    rollout_id: z.int().nullable().default(null),
    prompt: z.union([promptSchema, z.literal('')]).default(''),
    tokens: tokenIdsSchema.default([]),
    multimodal_inputs: jsonObjectSchema.nullable().default(null),
    multimodal_train_inputs: jsonObjectSchema.nullable().default(null),
    multimodal_train_input_id: z.string().nullable().default(null),
    apply_chat_template_kwargs: jsonObjectSchema.default({}),
    response: z.string().default(''),
    response_length: z.int().nonnegative().default(0),
    label: z.unknown().default(null),
    reward: z.union([z.number(), jsonObjectSchema]).nullable().default(null),
    loss_mask: z.array(maskValueSchema).nullable().default(null),
    weight_versions: z.array(z.string()).default([]),
    rollout_log_probs: z.array(z.number()).nullable().default(null),
    rollout_top_p_token_ids: z.array(z.int()).nullable().default(null),
    rollout_top_p_token_offsets: z.array(z.int()).nullable().default(null),
    rollout_routed_experts: z.unknown().default(null),
    remove_sample: z.boolean().default(false),
    teacher_log_probs: z.array(z.number()).nullable().default(null),
    status: sampleStatusSchema.default('pending'),
    metadata: jsonObjectSchema.default({}),
    generate_function_path: z.string().nullable().default(null),
    custom_rm_path: z.string().nullable().default(null),
    train_metadata: jsonObjectSchema.nullable().default(null),
    session_id: z.string().nullable().default(null),
    non_generation_time: z.number().nonnegative().default(0),
    spec_info: specInfoSchema.default(() => specInfoSchema.parse({})),
    prefix_cache_info: prefixCacheInfoSchema.default(() => prefixCacheInfoSchema.parse({})),
  })
  .superRefine((sample, context) => {
    if (sample.response_length > sample.tokens.length) {
      context.addIssue({
        code: 'custom',
        path: ['response_length'],
        message: `${sample.response_length} exceeds the ${sample.tokens.length} tokens of the sample`,
      });
    }
    if (sample.loss_mask !== null) {
      checkLength(context, ['loss_mask'], sample.loss_mask.length, sample.response_length, 'response_length');
    }
    if (sample.rollout_log_probs !== null) {
      checkLength(
        context,
        ['rollout_log_probs'],
        sample.rollout_log_probs.length,
        sample.response_length,
        'response_length',
      );
    }
  });

/** slime's `Sample` after parsing (every field present). */
export type Sample = z.output<typeof sampleSchema>;
/** A sample as written by hand or read from JSON: every field optional. */
export type SampleInput = z.input<typeof sampleSchema>;

/** Builds a sample with slime's defaults for every field not given, validating the invariants. */
export function createSample(fields: SampleInput = {}): Sample {
  return parseWire(sampleSchema, fields, 'sample');
}
