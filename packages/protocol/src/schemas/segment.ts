import { z } from 'zod';
import { chatMessageSchema, toolSchema } from './chat.js';
import {
  checkLength,
  jsonObjectSchema,
  logprobsSchema,
  maskValueSchema,
  routedExpertsChunkSchema,
  tokenIdsSchema,
} from './common.js';
import { routeTypeSchema, segmentReasonSchema } from './step-record.js';

const commonExtraInfo = {
  token_build_mode: z.enum(['tito', 'snapshot']),
  context_token_count: z.int().nonnegative(),
  output_token_count: z.int().nonnegative(),
  num_steps: z.int().positive(),
  lineage_id: z.string(),
  lineage_index: z.int().nonnegative(),
  segment_reason: segmentReasonSchema,
  segment_reasons: z.array(segmentReasonSchema),
  finalization_complete: z.literal(true),
  finalization_id: z.string().min(1),
  mask_nonlast_version_tokens: z.boolean().optional(),
  tool_call_hooks: jsonObjectSchema.optional(),
};

/** `extra_info` of a lineage-view segment (TITO mode): one record per lineage segment. */
export const lineageExtraInfoSchema = z.looseObject({
  ...commonExtraInfo,
  segment_view: z.literal('lineage'),
  alignment_method: z.literal('tito'),
  context_delta_token_count: z.int().nonnegative(),
  num_turns: z.int().nonnegative(),
  turn_ids: z.array(z.string()),
  branch_from_step_id: z.string().nullable(),
  step_ids: z.array(z.string()).min(1),
  timestamp: z.string(),
  history_rewritten: z.boolean(),
  trajectory_num_segments: z.int().positive(),
  tito_logprobs_invalid: z.boolean().optional(),
  tito_incremental_tokenization_failed: z.boolean().optional(),
});

/** `extra_info` of a timeline-view segment: one record per step. */
export const timelineExtraInfoSchema = z.looseObject({
  ...commonExtraInfo,
  segment_view: z.literal('timeline'),
  alignment_method: z.literal('snapshot_step'),
  num_turns: z.literal(1),
  turn_ids: z.array(z.string()).length(1),
  step_id: z.string(),
  timestamp: z.string(),
  history_rewritten: z.boolean(),
  trajectory_num_segments: z.int().positive(),
  route_type: routeTypeSchema,
  route_base_step_id: z.string().nullable(),
  snapshot_logprobs_invalid: z.boolean().optional(),
});

/** `extra_info` of a segment, discriminated by `segment_view`. */
export const segmentExtraInfoSchema = z.discriminatedUnion('segment_view', [
  lineageExtraInfoSchema,
  timelineExtraInfoSchema,
]);

/** `extra_info` of a segment. */
export type SegmentExtraInfo = z.infer<typeof segmentExtraInfoSchema>;

/**
 * A finalized segment as `/trajectory/read` returns it: the exact token ids, logprobs, loss mask and
 * (optionally) per-token weight versions of one training sample.
 */
export const segmentSchema = z
  .looseObject({
    uid: z.string().min(1),
    session_id: z.string().min(1),
    trajectory_id: z.string().min(1),
    turn_id: z.string().nullable(),
    instance_id: z.string().min(1),
    segment_index: z.int().nonnegative(),
    segment_count: z.int().positive(),
    messages: z.array(chatMessageSchema),
    tools: z.array(toolSchema).nullable(),
    tokens: tokenIdsSchema.min(1),
    full_logprobs: logprobsSchema,
    full_loss_mask: z.array(maskValueSchema),
    aligned_response_length: z.int().nonnegative(),
    label: z.unknown().optional(),
    finish_reason: z.string().nullable(),
    timestamp: z.number(),
    full_versions: z.array(z.string()).optional(),
    routed_experts_chunks: z.array(routedExpertsChunkSchema).optional(),
    extra_info: segmentExtraInfoSchema,
  })
  .superRefine((segment, context) => {
    const length = segment.tokens.length;
    checkLength(context, ['full_logprobs'], segment.full_logprobs.length, length, 'tokens');
    checkLength(context, ['full_loss_mask'], segment.full_loss_mask.length, length, 'tokens');
    if (segment.full_versions !== undefined) {
      checkLength(context, ['full_versions'], segment.full_versions.length, length, 'tokens');
    }
    let trainable = 0;
    for (const value of segment.full_loss_mask) trainable += value;
    if (segment.aligned_response_length !== trainable) {
      context.addIssue({
        code: 'custom',
        path: ['aligned_response_length'],
        message: `is ${segment.aligned_response_length} but full_loss_mask has ${trainable} trainable tokens`,
      });
    }
    if (segment.segment_index >= segment.segment_count) {
      context.addIssue({
        code: 'custom',
        path: ['segment_index'],
        message: `${segment.segment_index} is out of range for segment_count ${segment.segment_count}`,
      });
    }
  });

/** A finalized segment as `/trajectory/read` returns it. */
export type Segment = z.infer<typeof segmentSchema>;
