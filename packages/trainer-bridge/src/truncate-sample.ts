import type { RoutedExperts } from '@dressage/multi-segment';
import { DressageError, type Sample, SampleStatus, versionsToSpans } from '@dressage/protocol';

/** Checks a `maxSequenceLength` setting: null/undefined for none, else a positive integer. */
export function checkMaxSequenceLength(value: number | null | undefined): number | null {
  if (value === null || value === undefined) return null;
  if (!Number.isInteger(value) || value <= 0) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `maxSequenceLength must be a positive integer, got ${value}`,
      details: { field: 'maxSequenceLength', max_sequence_length: value },
    });
  }
  return value;
}

function isRoutedExperts(value: unknown): value is RoutedExperts {
  const routed = value as RoutedExperts | null;
  return typeof routed === 'object' && routed !== null && routed.ids instanceof Int32Array;
}

/**
 * The sample cut to its first `maxLength` tokens, as the reference's segment writer cuts a segment
 * longer than its token cap: the response keeps what is left of it after the prompt, and its loss
 * mask, rollout and teacher logprobs, per-token versions (`metadata.full_versions`, with
 * `version_spans` recomputed) and routed experts (`len(tokens) − 1` rows) are cut to
 * match; the sample is `truncated` (status and `metadata.truncated`). A sample that fits is
 * returned as is; the input is never modified.
 */
export function truncateSample(sample: Sample, maxLength: number): Sample {
  const limit = checkMaxSequenceLength(maxLength) as number;
  const total = sample.tokens.length;
  if (total <= limit) return sample;
  const cut = total - limit;
  const response = Math.max(0, sample.response_length - cut);
  const perToken = <T>(values: readonly T[] | null): T[] | null =>
    values === null ? null : values.slice(0, Math.max(0, values.length - cut));
  const metadata: Sample['metadata'] = { ...sample.metadata, truncated: true };
  if (Array.isArray(metadata.full_versions)) {
    const versions = metadata.full_versions.slice(0, limit).map(String);
    metadata.full_versions = versions;
    metadata.version_spans = versionsToSpans(versions);
  }
  const routed = sample.rollout_routed_experts;
  let routedExperts = routed;
  if (isRoutedExperts(routed) && routed.rows > limit - 1) {
    const rows = limit - 1;
    routedExperts = { ...routed, rows, ids: routed.ids.slice(0, rows * routed.numLayers * routed.topk) };
  }
  return {
    ...sample,
    tokens: sample.tokens.slice(0, limit),
    response_length: response,
    loss_mask: sample.loss_mask === null ? null : sample.loss_mask.slice(0, response),
    rollout_log_probs: perToken(sample.rollout_log_probs),
    teacher_log_probs: perToken(sample.teacher_log_probs),
    rollout_routed_experts: routedExperts,
    status: SampleStatus.TRUNCATED,
    metadata,
  };
}
