import type { PackedTrainBatch } from '@dressage/protocol';

/** Options of {@link createSyntheticTrainBatch}. */
export interface SyntheticTrainBatchOptions {
  samples: number;
  /** Tokens of the longest sample; sample i has `tokensPerSample − (i mod 5)`. */
  tokensPerSample: number;
  /** Response tokens of the longest response; sample i has `responseTokens − (i mod 3)`. */
  responseTokens: number;
  /** Shifts the token ids. Default 0. */
  seed?: number;
  /** Default true. */
  withLogProbs?: boolean;
}

const VOCABULARY = 151_000;

/**
 * A packed batch whose every value is a closed-form function of its position, so another process
 * (the Python worker's tests, with numpy) can rebuild it and compare field by field without
 * receiving a copy. Formulas, with `k` the global token index and `j` the global response index:
 * `tokens[k] = (k·7919 + seed) mod 151000`; `loss_masks[j] = 1` unless `⌊j/16⌋ mod 3 = 2`;
 * `rollout_log_probs[j] = float32(−(j mod 1000)·0.002)`; `rollout_ids[i] = ⌊i/4⌋`;
 * `rewards[i] = (i mod 7 − 3)/4`; `raw_rewards[i] = (i mod 7)/8`; `rollout_mask_sums[i] = (i mod 11 + 1)/8`;
 * `truncated[i] = (i mod 9 = 0)`; `sample_indices[i] = i`.
 */
export function createSyntheticTrainBatch(options: SyntheticTrainBatchOptions): PackedTrainBatch {
  const count = options.samples;
  const seed = options.seed ?? 0;
  const totalLengths = new Int32Array(count);
  const responseLengths = new Int32Array(count);
  let tokenTotal = 0;
  let responseTotal = 0;
  for (let i = 0; i < count; i++) {
    const total = options.tokensPerSample - (i % 5);
    const response = Math.max(0, Math.min(total - 1, options.responseTokens - (i % 3)));
    totalLengths[i] = total;
    responseLengths[i] = response;
    tokenTotal += total;
    responseTotal += response;
  }
  const tokens = new Int32Array(tokenTotal);
  for (let k = 0; k < tokenTotal; k++) tokens[k] = (k * 7919 + seed) % VOCABULARY;
  const lossMasks = new Uint8Array(responseTotal);
  for (let j = 0; j < responseTotal; j++) lossMasks[j] = Math.floor(j / 16) % 3 === 2 ? 0 : 1;
  let logProbs: Float32Array | null = null;
  if (options.withLogProbs ?? true) {
    logProbs = new Float32Array(responseTotal);
    for (let j = 0; j < responseTotal; j++) logProbs[j] = -(j % 1000) * 0.002;
  }
  const perSample = <T extends Int32Array | Float32Array | Float64Array | Uint8Array>(
    array: T,
    value: (i: number) => number,
  ): T => {
    for (let i = 0; i < count; i++) array[i] = value(i);
    return array;
  };
  return {
    sample_count: count,
    tokens,
    total_lengths: totalLengths,
    response_lengths: responseLengths,
    loss_masks: lossMasks,
    rollout_log_probs: logProbs,
    teacher_log_probs: null,
    rollout_ids: perSample(new Int32Array(count), (i) => Math.floor(i / 4)),
    rewards: perSample(new Float32Array(count), (i) => ((i % 7) - 3) / 4),
    raw_rewards: perSample(new Float32Array(count), (i) => (i % 7) / 8),
    rollout_mask_sums: perSample(new Float64Array(count), (i) => ((i % 11) + 1) / 8),
    truncated: perSample(new Uint8Array(count), (i) => (i % 9 === 0 ? 1 : 0)),
    sample_indices: perSample(new Int32Array(count), (i) => i),
  };
}
