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

/** `extra_info` of a lineage-view segment. */
export type LineageExtraInfo = z.infer<typeof lineageExtraInfoSchema>;

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

/** `extra_info` of a timeline-view segment. */
export type TimelineExtraInfo = z.infer<typeof timelineExtraInfoSchema>;

/** `extra_info` of a segment, discriminated by `segment_view`. */
export const segmentExtraInfoSchema = z.discriminatedUnion('segment_view', [
  lineageExtraInfoSchema,
  timelineExtraInfoSchema,
]);

/** `extra_info` of a segment. */
export type SegmentExtraInfo = z.infer<typeof segmentExtraInfoSchema>;

// The fields of a segment record; the full schema checks every token, the shape schema only the
// structure (see segmentShapeSchema).
const segmentFields = {
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
  full_versions: z
    .array(z.union([z.string(), z.number(), z.boolean(), z.null()]))
    .nullable()
    .transform(versionLabels)
    .optional(),
  routed_experts_chunks: z.array(routedExpertsChunkSchema).optional(),
  extra_info: segmentExtraInfoSchema,
};

/**
 * One per-token weight-version label as the reference reads it: a string as is, `null` as
 * `"unknown"`, anything else (an engine that reports its version as a number) stringified.
 */
export function versionLabel(value: unknown): string {
  if (typeof value === 'string') return value;
  return value === null || value === undefined ? 'unknown' : String(value);
}

// A segment's `full_versions` with every label a string; absent or null stays absent. The common
// case (all strings, as this proxy writes them) is returned without a copy.
function versionLabels(values: readonly unknown[] | null | undefined): string[] | undefined {
  if (values === null || values === undefined) return undefined;
  for (let index = 0; index < values.length; index++) {
    if (typeof values[index] !== 'string') return values.map(versionLabel);
  }
  return values as string[];
}

interface SegmentArrays {
  tokens: ArrayLike<number>;
  full_logprobs: ArrayLike<number>;
  full_loss_mask: ArrayLike<number>;
  full_versions?: readonly string[] | undefined;
  aligned_response_length: number;
  segment_index: number;
  segment_count: number;
}

// Lengths agree, the aligned length counts the mask's ones and the index is in range.
function checkSegment(segment: SegmentArrays, context: z.core.$RefinementCtx): void {
  const length = segment.tokens.length;
  checkLength(context, ['full_logprobs'], segment.full_logprobs.length, length, 'tokens');
  checkLength(context, ['full_loss_mask'], segment.full_loss_mask.length, length, 'tokens');
  if (segment.full_versions !== undefined) {
    checkLength(context, ['full_versions'], segment.full_versions.length, length, 'tokens');
  }
  if (segment.segment_index >= segment.segment_count) {
    context.addIssue({
      code: 'custom',
      path: ['segment_index'],
      message: `${segment.segment_index} is out of range for segment_count ${segment.segment_count}`,
    });
  }
  // One pass counts the trainable tokens and checks every entry is 0 or 1: the mask is what
  // decides which tokens are trained, so even the shape check reads each of its entries.
  let trainable = 0;
  const mask = segment.full_loss_mask;
  for (let index = 0; index < mask.length; index++) {
    const value = mask[index];
    if (value === 1) trainable++;
    else if (value !== 0) {
      context.addIssue({
        code: 'custom',
        path: ['full_loss_mask', index],
        message: `is ${value}, expected 0 or 1`,
      });
      return;
    }
  }
  if (segment.aligned_response_length !== trainable) {
    context.addIssue({
      code: 'custom',
      path: ['aligned_response_length'],
      message: `is ${segment.aligned_response_length} but full_loss_mask has ${trainable} trainable tokens`,
    });
  }
}

/**
 * A finalized segment record as `/trajectory/read` writes it in JSON, every token checked: the
 * exact token ids, logprobs, loss mask and (optionally) per-token weight versions of one training
 * sample. Unknown keys are kept.
 */
export const segmentSchema = z.looseObject(segmentFields).superRefine(checkSegment);

/** A segment record as JSON carries it (number arrays). */
export type SegmentRecord = z.infer<typeof segmentSchema>;

type SegmentFieldValues = z.infer<z.ZodObject<typeof segmentFields>>;

/**
 * A finalized segment with its token data in typed arrays: what `TrajectoryStore.read`,
 * `ProxyClient.readTrajectory` and the generate functions pass along. `full_logprobs` is float64
 * so the decimal the proxy wrote is kept exactly.
 */
export type Segment = Omit<SegmentFieldValues, 'tokens' | 'full_logprobs' | 'full_loss_mask'> & {
  tokens: Int32Array;
  full_logprobs: Float64Array;
  full_loss_mask: Uint8Array;
};

// Structure only: an array is an array; its elements are the server's (the proxy writes them
// from typed arrays) and are not walked one by one.
function arrayOf<T>(what: string) {
  return z.custom<T[]>((value) => Array.isArray(value), `expected an array of ${what}`);
}

/**
 * The cheap check a client runs on each segment of a `/trajectory/read` answer: the structure
 * (every field present with its type, arrays of equal length, the extra_info record and the
 * routed-expert chunks in full, every loss-mask entry 0 or 1) but not every token id, message or
 * logprob; then the token data moves into typed arrays.
 */
export const segmentShapeSchema = z
  .looseObject({
    ...segmentFields,
    messages: arrayOf<SegmentFieldValues['messages'][number]>('messages'),
    tools: arrayOf<NonNullable<SegmentFieldValues['tools']>[number]>('tools').nullable(),
    tokens: arrayOf<number>('token ids').refine((tokens) => tokens.length > 0, 'must not be empty'),
    full_logprobs: arrayOf<number>('logprobs'),
    full_loss_mask: arrayOf<number>('mask values'),
    full_versions: arrayOf<unknown>('version labels').nullable().transform(versionLabels).optional(),
    // routed_experts_chunks keeps its full schema: a handful of chunks per segment, each one string.
  })
  .superRefine(checkSegment)
  .transform((record): Segment => segmentFromRecord(record));

/**
 * A segment without its token data: the fields a store keeps beside the token arrays, from which
 * it materialises the rest.
 */
export type SegmentMeta = Omit<
  Segment,
  | 'tokens'
  | 'full_logprobs'
  | 'full_loss_mask'
  | 'aligned_response_length'
  | 'full_versions'
  | 'routed_experts_chunks'
>;

/** Moves a segment record's token data into typed arrays (no validation: see the schemas). */
export function segmentFromRecord(
  record: Omit<SegmentFieldValues, 'tokens' | 'full_logprobs' | 'full_loss_mask'> & {
    tokens: ArrayLike<number>;
    full_logprobs: ArrayLike<number>;
    full_loss_mask: ArrayLike<number>;
  },
): Segment {
  return {
    ...record,
    tokens: Int32Array.from(record.tokens),
    full_logprobs: Float64Array.from(record.full_logprobs),
    full_loss_mask: Uint8Array.from(record.full_loss_mask),
  };
}

// Finite numbers print the same through join as through JSON.stringify; anything else goes the
// slow way so the output stays JSON (null for a non-finite value, as JSON.stringify writes it).
function numberList(values: Int32Array | Float64Array | Uint8Array): string {
  if (values instanceof Float64Array) {
    for (let index = 0; index < values.length; index++) {
      if (!Number.isFinite(values[index])) return JSON.stringify(Array.from(values));
    }
  }
  return `[${values.join(',')}]`;
}

/**
 * The JSON record of a segment, as `/trajectory/read` writes it: the typed arrays become JSON
 * arrays without an intermediate array of numbers.
 */
export function segmentToJson(segment: Segment): string {
  const { tokens, full_logprobs, full_loss_mask, ...rest } = segment;
  const head = JSON.stringify(rest);
  const arrays = `"tokens":${numberList(tokens)},"full_logprobs":${numberList(full_logprobs)},"full_loss_mask":${numberList(full_loss_mask)}}`;
  return head === '{}' ? `{${arrays}` : `${head.slice(0, -1)},${arrays}`;
}
