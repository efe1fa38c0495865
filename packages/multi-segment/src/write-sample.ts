import {
  DressageError,
  distinctRealVersions,
  isRealVersion,
  type Sample,
  SampleStatus,
  UNKNOWN_TOKEN_VERSION,
  versionsToSpans,
} from '@dressage/protocol';
import {
  decodeRoutedExperts,
  type RoutedExperts,
  requireRoutedExpertsShape,
  routedExpertsShapeOf,
} from './routed-experts.js';
import type { SegmentInput } from './segment-input.js';

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
] as const;

function where(segment: SegmentInput, options: WriteSampleOptions): string {
  const session = options.sessionId ?? segment.session_id ?? '(unknown session)';
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

// Version labels as the reference writes them: strings as they are, numbers stringified, a missing
// label "unknown". Anything else is an error naming the token.
function versionLabels(versions: unknown, length: number, at: string): string[] | null {
  if (versions === undefined || versions === null) return null;
  if (!Array.isArray(versions)) {
    throw invalid(`${at}: full_versions must be a list, got ${JSON.stringify(versions)}`, {
      field: 'full_versions',
    });
  }
  if (versions.length !== length) {
    throw invalid(`${at}: full_versions has ${versions.length} entries but tokens has ${length}`, {
      field: 'full_versions',
    });
  }
  const labels = new Array<string>(length);
  for (let i = 0; i < length; i++) {
    const version: unknown = versions[i];
    if (typeof version === 'string') labels[i] = version;
    else if (version === null || version === undefined) labels[i] = UNKNOWN_TOKEN_VERSION;
    else if (typeof version === 'number' && Number.isFinite(version)) labels[i] = String(version);
    else {
      throw invalid(
        `${at}: full_versions[${i}] is ${JSON.stringify(version) ?? String(version)}, not a version label (a string or number)`,
        { field: `full_versions[${i}]` },
      );
    }
  }
  return labels;
}

// A JSON array or a typed array (a `Segment` read from the proxy carries its token data in those).
function isNumberList(value: unknown): value is ArrayLike<number> {
  return Array.isArray(value) || (ArrayBuffer.isView(value) && !(value instanceof DataView));
}

// The first `length` entries as plain numbers: samples keep their token data in arrays.
function head(values: ArrayLike<number>, length: number): number[] {
  const out = new Array<number>(length);
  for (let index = 0; index < length; index++) out[index] = values[index] as number;
  return out;
}

function validateSegment(segment: SegmentInput, options: WriteSampleOptions): string[] | null {
  const at = where(segment, options);
  const { tokens, full_loss_mask: mask, full_logprobs: logprobs } = segment;
  if (!isNumberList(tokens) || tokens.length === 0) {
    throw invalid(`${at}: tokens must be a non-empty list`, { field: 'tokens' });
  }
  if (!isNumberList(mask) || mask.length !== tokens.length) {
    throw invalid(`${at}: full_loss_mask has ${mask?.length ?? 0} entries but tokens has ${tokens.length}`, {
      field: 'full_loss_mask',
    });
  }
  if (!isNumberList(logprobs) || logprobs.length !== tokens.length) {
    throw invalid(
      `${at}: full_logprobs has ${logprobs?.length ?? 0} entries but tokens has ${tokens.length}`,
      {
        field: 'full_logprobs',
      },
    );
  }
  const versions = versionLabels(segment.full_versions, tokens.length, at);
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i] as number;
    if (!Number.isInteger(token) || token < 0) {
      throw invalid(`${at}: tokens[${i}] is ${token}, not a token id`, { field: `tokens[${i}]` });
    }
    // 1.0 and 0.0 are the same numbers as 1 and 0; 0.5 or 2 are not mask values.
    const value = mask[i];
    if (value !== 0 && value !== 1) {
      throw invalid(`${at}: full_loss_mask[${i}] is ${value}, expected 0 or 1`, {
        field: `full_loss_mask[${i}]`,
      });
    }
    const logprob = logprobs[i];
    if (typeof logprob !== 'number' || Number.isNaN(logprob)) {
      throw invalid(`${at}: full_logprobs[${i}] is ${logprob}, not a number`, {
        field: `full_logprobs[${i}]`,
      });
    }
  }
  return versions;
}

// The text of a message's content: a string as is, the text parts of a list joined.
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .filter((part): part is { text: string } => typeof (part as { text?: unknown })?.text === 'string')
      .map((part) => part.text)
      .join('');
  }
  return typeof content === 'object' ? JSON.stringify(content) : String(content);
}

// The content of the last assistant message that has one; one that ended on a tool call
// (`content: null`) is skipped, as the reference does.
function lastAssistantText(messages: readonly unknown[] | null | undefined): string | null {
  if (!Array.isArray(messages)) return null;
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i] as { role?: unknown; content?: unknown } | null;
    if (message?.role !== 'assistant') continue;
    if (message.content !== null && message.content !== undefined) return contentText(message.content);
  }
  return null;
}

// R3: the segment's routed experts cut to the (capped) token count; with replay on, a segment
// without them (or a model shape to decode them with) is an error, not a sample trained without.
function routedExpertsOf(
  segment: SegmentInput,
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
 * - The segment is validated first (non-empty tokens, 0/1 mask, equal lengths of tokens, mask,
 *   logprobs and versions); a problem is an `invalid_argument` error naming the segment, session
 *   and field. Numeric version labels are stringified and missing ones recorded as `"unknown"`.
 * - Longer than `maxTokensPerGpu × contextParallelSize` → truncated to the cap, `metadata.truncated`.
 * - With `extra_info.mask_nonlast_version_tokens` and more than one real version among trainable
 *   tokens, trainable tokens of any real version other than the last one are masked out.
 * - The response starts at the first trainable token of the (unmasked) segment.
 * - Status is `truncated` when the segment's `finish_reason` is `"length"`, else `completed`.
 * - `response` is the content of the last assistant message that has one (a final tool call with
 *   `content: null` is skipped), else `agentResponse`.
 * - R3: `routed_experts_chunks` are decoded with `numLayers × moeRouterTopk` ids per row and cut to
 *   `len(tokens) − 1` rows ({@link decodeRoutedExperts}); with `useRolloutRoutingReplay` a segment
 *   without them is an error.
 */
export function writeSampleFromSegment(
  template: Sample,
  segment: SegmentInput,
  options: WriteSampleOptions = {},
): Sample {
  const allVersions = validateSegment(segment, options);
  const cap = tokenCap(options);
  const fullLength = segment.tokens.length;
  const length = cap === null ? fullLength : Math.min(fullLength, cap);
  const truncated = length < fullLength;

  const tokens = head(segment.tokens, length);
  const originalMask = head(segment.full_loss_mask, length);
  const logprobs = head(segment.full_logprobs, length);
  const versions = allVersions === null ? null : allVersions.slice(0, length);
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
  const sample = structuredClone(rest) as Sample;
  const metadata = sample.metadata;
  for (const key of derivedMetadataKeys) delete metadata[key];

  const trainMask = originalMask.slice(start);
  if (versions !== null) {
    const trainableVersions: string[] = [];
    for (let i = start; i < length; i++)
      if (originalMask[i] === 1) trainableVersions.push(versions[i] as string);
    const distinct = distinctRealVersions(trainableVersions);
    const realTrainable = trainableVersions.filter((version) => isRealVersion(version));
    metadata.full_versions = versions;
    metadata.version_spans = versionsToSpans(versions);
    metadata.dressage_start_token_version = realTrainable[0] ?? null;
    metadata.dressage_end_token_version = realTrainable[realTrainable.length - 1] ?? null;
    if (distinct.length > 1) {
      metadata.dressage_partial_rollout = true;
      if (segment.extra_info?.mask_nonlast_version_tokens === true) {
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

  const sessionId = options.sessionId ?? segment.session_id ?? null;
  const instanceId = options.instanceId ?? segment.instance_id ?? null;
  metadata.session_id = sessionId;
  metadata.instance_id = instanceId;
  metadata.messages = segment.messages ?? [];
  metadata.proxy_extra_info = segment.extra_info ?? {};
  metadata.segment_count = options.segmentCount ?? segment.segment_count ?? 1;
  metadata.selected_segment_index = segment.segment_index;
  metadata.all_segment_uids = options.allSegmentUids
    ? [...options.allSegmentUids]
    : typeof segment.uid === 'string'
      ? [segment.uid]
      : [];
  if (truncated) metadata.truncated = true;

  return {
    ...sample,
    tokens,
    response_length: length - start,
    loss_mask: trainMask as (0 | 1)[],
    rollout_log_probs: logprobs.slice(start),
    teacher_log_probs: null,
    rollout_routed_experts: routedExperts,
    rollout_top_p_token_ids: null,
    rollout_top_p_token_offsets: null,
    response: lastAssistantText(segment.messages) ?? options.agentResponse ?? '',
    status: segment.finish_reason === 'length' ? SampleStatus.TRUNCATED : SampleStatus.COMPLETED,
  } as Sample;
}
