import {
  type ContentPart,
  DressageError,
  distinctRealVersions,
  isRealVersion,
  type Sample,
  SampleStatus,
  type Segment,
  versionsToSpans,
} from '@dressage/protocol';
import {
  decodeRoutedExperts,
  type RoutedExperts,
  requireRoutedExpertsShape,
  routedExpertsShapeOf,
} from './routed-experts.js';

/** Options of {@link writeSampleFromSegment}. */
export interface WriteSampleOptions {
  /** Session written to `metadata.session_id`. Default: the segment's `session_id`. */
  sessionId?: string | null;
  /** Instance written to `metadata.instance_id`. Default: the segment's `instance_id`. */
  instanceId?: string | null;
  /** Response text used when the segment's messages hold no assistant reply. */
  agentResponse?: string | null;
  /** slime's `--max-tokens-per-gpu`: with it, a segment longer than the cap is truncated. */
  maxTokensPerGpu?: number | null;
  /** Context-parallel size; the token cap is `maxTokensPerGpu × contextParallelSize`. Default 1. */
  contextParallelSize?: number | null;
  /**
   * The proxy's `--mask-nonlast-version-tokens`, set by the trainer: mask trainable tokens of older
   * weight versions even where the segment's `extra_info` does not ask for it (a proxy started
   * without the flag). Default false: the segment's `extra_info` decides.
   */
  maskNonlastVersionTokens?: boolean;
  /** Written to `metadata.segment_count`. Default: the segment's `segment_count`, else 1. */
  segmentCount?: number;
  /** Written to `metadata.all_segment_uids`. Default: the segment's own uid. */
  allSegmentUids?: readonly string[];
  /**
   * slime's `--use-rollout-routing-replay` (R3): every segment must carry `routed_experts_chunks`,
   * decoded to `rollout_routed_experts` with `numLayers` and `moeRouterTopk`.
   */
  useRolloutRoutingReplay?: boolean;
  /** slime's `--num-layers`: with `moeRouterTopk`, routed experts are decoded even with replay off. */
  numLayers?: number | null;
  /** slime's `--moe-router-topk`. */
  moeRouterTopk?: number | null;
}

// Keys derived from a segment; a template that already carries them (a retried or re-expanded
// sample) must not leak stale values into the new one.
const derivedMetadataKeys = [
  'full_versions',
  'version_spans',
  'dressage_start_token_version',
  'dressage_end_token_version',
  'dressage_partial_rollout',
  'truncated',
  'finish_reason',
] as const;

function where(segment: Segment, options: WriteSampleOptions): string {
  const session = options.sessionId ?? segment.session_id;
  return `segment ${segment.segment_index} of session ${session}`;
}

function invalid(message: string, details: Record<string, unknown>): DressageError {
  return new DressageError({ code: 'invalid_argument', message, details });
}

/** The token cap `maxTokensPerGpu × contextParallelSize`, or null when no cap is configured. */
export function tokenCap(
  options: Pick<WriteSampleOptions, 'maxTokensPerGpu' | 'contextParallelSize'>,
): number | null {
  const perGpu = options.maxTokensPerGpu;
  if (perGpu === null || perGpu === undefined) return null;
  const parallel = options.contextParallelSize ?? 1;
  if (!Number.isInteger(perGpu) || perGpu <= 0) {
    throw invalid(`maxTokensPerGpu must be a positive integer, got ${perGpu}`, {
      max_tokens_per_gpu: perGpu,
    });
  }
  if (!Number.isInteger(parallel) || parallel <= 0) {
    throw invalid(`contextParallelSize must be a positive integer, got ${parallel}`, {
      context_parallel_size: parallel,
    });
  }
  return perGpu * parallel;
}

// The first `length` mask entries; the segment's schema admits only 0 and 1.
function maskHead(mask: Uint8Array, length: number): (0 | 1)[] {
  const out = new Array<0 | 1>(length);
  for (let index = 0; index < length; index++) out[index] = mask[index] === 1 ? 1 : 0;
  return out;
}

// The text of a message's content: a string as is, the text parts of a list joined. The read
// answer's shape check does not walk messages, so a part may be anything: only text parts count.
function contentText(content: string | readonly ContentPart[]): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let text = '';
  for (const part of content as readonly (ContentPart | null)[]) {
    if (typeof part?.text === 'string') text += part.text;
  }
  return text;
}

// The content of the last assistant message that has one; one that ended on a tool call
// (`content: null`) is skipped, as the reference does.
function lastAssistantText(messages: Segment['messages']): string | null {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role !== 'assistant') continue;
    if (message.content !== null && message.content !== undefined) return contentText(message.content);
  }
  return null;
}

// R3: the segment's routed experts cut to the (capped) token count; with replay on, a segment
// without them (or a model shape to decode them with) is an error, not a sample trained without.
function routedExpertsOf(
  segment: Segment,
  options: WriteSampleOptions,
  tokenCount: number,
): RoutedExperts | null {
  const at = where(segment, options);
  const replay = options.useRolloutRoutingReplay === true;
  const shape = replay ? requireRoutedExpertsShape(options, at) : routedExpertsShapeOf(options);
  if (shape === null) return null;
  const routed = decodeRoutedExperts(segment.routed_experts_chunks, shape, tokenCount, at);
  if (routed === null && replay) {
    throw invalid(
      `${at}: useRolloutRoutingReplay is on but the segment has no routed_experts_chunks; start the Dressage proxy with --use-rollout-routing-replay`,
      { field: 'routed_experts_chunks' },
    );
  }
  return routed;
}

/**
 * Writes one finalized segment into a copy of `template` (the template is not modified): the full
 * token list, the response tail's loss mask and logprobs, per-token versions and the metadata the
 * trainer and the staleness filter read.
 *
 * The segment is a `Segment` as `ProxyClient.readTrajectory` returns it: its schema has checked the
 * fields (equal lengths of tokens, mask, logprobs and versions, a 0/1 mask), so they are not checked
 * again here.
 *
 * - Longer than `maxTokensPerGpu × contextParallelSize` → truncated to the cap, `metadata.truncated`.
 * - With `extra_info.mask_nonlast_version_tokens` (or `maskNonlastVersionTokens`) and more than one real version among trainable
 *   tokens, trainable tokens of any real version other than the last one are masked out.
 * - The response starts at the first trainable token of the (unmasked) segment.
 * - Status is `truncated` when the segment's `finish_reason` is `"length"`, else `completed`; the
 *   reason itself is `metadata.finish_reason`.
 * - `response` is the content of the last assistant message that has one (a final tool call with
 *   `content: null` is skipped), else `agentResponse`.
 * - R3: `routed_experts_chunks` are decoded with `numLayers × moeRouterTopk` ids per row and cut to
 *   `len(tokens) − 1` rows ({@link decodeRoutedExperts}); with `useRolloutRoutingReplay` a segment
 *   without them is an error.
 */
export function writeSampleFromSegment(
  template: Sample,
  segment: Segment,
  options: WriteSampleOptions = {},
): Sample {
  const cap = tokenCap(options);
  const fullLength = segment.tokens.length;
  const length = cap === null ? fullLength : Math.min(fullLength, cap);
  const truncated = length < fullLength;

  // Samples keep their token data in plain arrays.
  const tokens = Array.from(segment.tokens.subarray(0, length));
  const originalMask = maskHead(segment.full_loss_mask, length);
  const logprobs = Array.from(segment.full_logprobs.subarray(0, length));
  const versions = segment.full_versions === undefined ? null : segment.full_versions.slice(0, length);
  const routedExperts = routedExpertsOf(segment, options, length);

  let start = originalMask.indexOf(1);
  if (start === -1) start = length;

  const {
    tokens: _tokens,
    loss_mask: _lossMask,
    rollout_log_probs: _logprobs,
    teacher_log_probs: _teacher,
    rollout_top_p_token_ids: _topPIds,
    rollout_top_p_token_offsets: _topPOffsets,
    ...rest
  } = template;
  // Nested template fields (metadata, spec_info, ...) are copied so samples never share them.
  const sample = structuredClone(rest);
  const metadata = sample.metadata;
  for (const key of derivedMetadataKeys) delete metadata[key];

  const trainMask = originalMask.slice(start);
  if (versions !== null) {
    const trainableVersions: string[] = [];
    for (let i = start; i < length; i++) {
      const version = versions[i];
      if (originalMask[i] === 1 && version !== undefined) trainableVersions.push(version);
    }
    const distinct = distinctRealVersions(trainableVersions);
    const realTrainable = trainableVersions.filter((version) => isRealVersion(version));
    metadata.full_versions = versions;
    metadata.version_spans = versionsToSpans(versions);
    metadata.dressage_start_token_version = realTrainable[0] ?? null;
    metadata.dressage_end_token_version = realTrainable[realTrainable.length - 1] ?? null;
    if (distinct.length > 1) {
      metadata.dressage_partial_rollout = true;
      if (
        segment.extra_info.mask_nonlast_version_tokens === true ||
        options.maskNonlastVersionTokens === true
      ) {
        // Tokens sampled under older weights would be trained as if on-policy; keep only the last
        // version's tokens. Tokens without a real version carry no evidence of staleness and stay.
        const last = realTrainable[realTrainable.length - 1];
        for (let i = 0; i < trainMask.length; i++) {
          const version = versions[start + i];
          if (trainMask[i] === 1 && isRealVersion(version) && version !== last) trainMask[i] = 0;
        }
      }
    }
  }

  metadata.session_id = options.sessionId ?? segment.session_id;
  metadata.instance_id = options.instanceId ?? segment.instance_id;
  metadata.messages = segment.messages;
  metadata.proxy_extra_info = segment.extra_info;
  metadata.segment_count = options.segmentCount ?? segment.segment_count;
  metadata.selected_segment_index = segment.segment_index;
  // `segment_boundary` on a segment its trajectory continues after; the engine's reason on the last.
  metadata.finish_reason = segment.finish_reason;
  metadata.all_segment_uids = options.allSegmentUids ? [...options.allSegmentUids] : [segment.uid];
  if (truncated) metadata.truncated = true;

  return {
    ...sample,
    tokens,
    response_length: length - start,
    loss_mask: trainMask,
    rollout_log_probs: logprobs.slice(start),
    teacher_log_probs: null,
    rollout_routed_experts: routedExperts,
    rollout_top_p_token_ids: null,
    rollout_top_p_token_offsets: null,
    response: lastAssistantText(segment.messages) ?? options.agentResponse ?? '',
    status: segment.finish_reason === 'length' ? SampleStatus.TRUNCATED : SampleStatus.COMPLETED,
  };
}
