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

/** Why a new segment (or lineage) started before a step. */
export const segmentReasonSchema = z.enum([
  'initial',
  'history_rewrite',
  'message_prefix_mismatch',
  'tools_changed',
  'tito_routing_render_failed',
  'tito_incremental_tokenization_failed',
]);

/** Why a new segment (or lineage) started before a step. */
export type SegmentReason = z.infer<typeof segmentReasonSchema>;

/** How a request was attached to the session's lineages. */
export const routeTypeSchema = z.enum(['append', 'branch', 'create']);

/** How a request was attached to the session's lineages. */
export type RouteType = z.infer<typeof routeTypeSchema>;

/** A message after normalisation for comparisons (ids sanitised, arguments canonical JSON). */
export const normalizedMessageSchema = z.looseObject({
  role: z.string(),
  content: z.string().nullable().optional(),
});

const stepIdSchema = z.string().regex(/^step-\d{6,}$/, 'must look like step-000001');
const lineageIdSchema = z.string().regex(/^lineage-\d{6,}$/, 'must look like lineage-000001');

/**
 * What the proxy records for one generation call. Token data is shown in its JSON form; the proxy
 * keeps it in typed arrays in memory.
 */
export const stepRecordSchema = z
  .looseObject({
    turn_id: z.string(),
    step_id: stepIdSchema,
    lineage_id: lineageIdSchema,
    lineage_index: z.int().nonnegative(),
    route_type: routeTypeSchema,
    route_base_step_id: stepIdSchema.nullable(),
    request_messages: z.array(chatMessageSchema),
    normalized_request_messages: z.array(normalizedMessageSchema),
    messages_snapshot: z.array(chatMessageSchema),
    normalized_messages_snapshot: z.array(normalizedMessageSchema),
    tools: z.array(toolSchema).nullable(),
    raw_response_text: z.string(),
    prompt_token_ids: tokenIdsSchema,
    prompt_token_logprobs: z.array(z.number().nullable()).nullable(),
    snapshot_token_ids: tokenIdsSchema,
    response_token_ids: tokenIdsSchema,
    response_logprobs: logprobsSchema,
    all_token_ids: tokenIdsSchema,
    all_logprobs: logprobsSchema,
    all_logprobs_invalid: z.boolean(),
    input_token_texts: z.array(z.string()).nullable(),
    output_token_texts: z.array(z.string()).nullable(),
    snapshot_rendered: z.string(),
    snapshot_rendered_len: z.int().nonnegative(),
    snapshot_tools_hash: z.string().nullable(),
    prompt_versions: z.array(z.string()),
    response_versions: z.array(z.string()),
    all_versions: z.array(z.string()),
    concat_token_ids: tokenIdsSchema,
    concat_response_logprobs: logprobsSchema,
    concat_response_mask: z.array(maskValueSchema),
    concat_versions: z.array(z.string()),
    concat_context_token_count: z.int().nonnegative(),
    concat_output_token_count: z.int().nonnegative(),
    concat_logprobs_invalid: z.boolean(),
    concat_incremental_tokenization_failed: z.boolean(),
    response_routed_experts_chunks: z.array(routedExpertsChunkSchema).nullable(),
    lineage_segment_boundary_before: z.boolean(),
    lineage_segment_reasons_before: z.array(segmentReasonSchema),
    segment_boundary_before: z.boolean(),
    segment_reason_before: segmentReasonSchema.nullable(),
    segment_reasons_before: z.array(segmentReasonSchema),
    rewrite_reason: z.string().nullable(),
    finish_reason: z.string(),
    request_version: z.string().nullable(),
    response_version: z.string().nullable(),
    tool_call_hook_metadata: jsonObjectSchema.nullable(),
    timestamp: z.number(),
  })
  .superRefine((step, context) => {
    const prompt = step.prompt_token_ids.length;
    const response = step.response_token_ids.length;
    checkLength(
      context,
      ['response_logprobs'],
      step.response_logprobs.length,
      response,
      'response_token_ids',
    );
    checkLength(
      context,
      ['all_token_ids'],
      step.all_token_ids.length,
      prompt + response,
      'prompt + response ids',
    );
    checkLength(
      context,
      ['all_logprobs'],
      step.all_logprobs.length,
      step.all_token_ids.length,
      'all_token_ids',
    );
    checkLength(
      context,
      ['all_versions'],
      step.all_versions.length,
      step.all_token_ids.length,
      'all_token_ids',
    );
    checkLength(context, ['prompt_versions'], step.prompt_versions.length, prompt, 'prompt_token_ids');
    checkLength(
      context,
      ['response_versions'],
      step.response_versions.length,
      response,
      'response_token_ids',
    );
    const concat = step.concat_token_ids.length;
    checkLength(
      context,
      ['concat_response_mask'],
      step.concat_response_mask.length,
      concat,
      'concat_token_ids',
    );
    checkLength(
      context,
      ['concat_response_logprobs'],
      step.concat_response_logprobs.length,
      concat,
      'concat_token_ids',
    );
    checkLength(context, ['concat_versions'], step.concat_versions.length, concat, 'concat_token_ids');
    checkLength(
      context,
      ['concat_output_token_count'],
      step.concat_context_token_count + step.concat_output_token_count,
      concat,
      'concat_token_ids',
    );
  });

/** What the proxy records for one generation call. */
export type StepRecord = z.infer<typeof stepRecordSchema>;
