import type { Sample } from '@dressage/protocol';

// Labels are any JSON value in practice (numbers, lists); rewards compare their text form.
function labelText(sample: Sample): string {
  const label = sample.label ?? sample.metadata.label;
  if (label === null || label === undefined) return '';
  return typeof label === 'string' ? label : JSON.stringify(label);
}

function numberOr(value: unknown, fallback: number): number {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value === 'string' && value.trim() !== '' && Number.isFinite(Number(value)))
    return Number(value);
  return fallback;
}

/** 1 when the trimmed response equals the trimmed label; an empty label always scores 0. */
export function exactMatchReward(sample: Sample): number {
  const label = labelText(sample).trim();
  if (label === '') return 0;
  return sample.response.trim() === label ? 1 : 0;
}

/**
 * 1 when the response contains the trimmed label. An empty label scores 0: a sample without a
 * label must not be rewarded for every response.
 */
export function containsLabelReward(sample: Sample): number {
  const label = labelText(sample).trim();
  if (label === '') return 0;
  return sample.response.includes(label) ? 1 : 0;
}

/** `metadata.constant_reward`, default 0 (useful for smoke runs and placeholders). */
export function constantReward(sample: Sample): number {
  return numberOr(sample.metadata.constant_reward, 0);
}

/** A score computed upstream: `metadata.reward`, else `metadata.score`, else 0. */
export function metadataScoreReward(sample: Sample): number {
  const metadata = sample.metadata;
  if (metadata.reward !== undefined && metadata.reward !== null) return numberOr(metadata.reward, 0);
  return numberOr(metadata.score, 0);
}

/** The built-in reward functions by name; `default` is `contains_label`. */
export const builtinRewards = {
  exact_match: exactMatchReward,
  contains_label: containsLabelReward,
  constant: constantReward,
  metadata_score: metadataScoreReward,
  default: containsLabelReward,
} as const;
