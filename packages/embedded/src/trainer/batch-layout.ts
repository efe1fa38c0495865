import { DressageError, type PackedTrainBatch } from '@dressage/protocol';
import type { PolicyLossBatch } from '@dressage/trainer-bridge';
import type { CausalLanguageModel } from '../model.js';

/** Where one sample of a packed batch lives. */
export interface SampleSpan {
  /** Index in the batch. */
  sample: number;
  /** Offset of its first token in `tokens`. */
  tokenOffset: number;
  totalLength: number;
  responseLength: number;
  /** Offset of its first response token in the per-token arrays. */
  responseOffset: number;
}

/**
 * One micro-batch, laid out for the policy loss in padded form: row `r`, position `t` holds the
 * logprob of token `t + 1` of the row's sample. Every per-token column has `rows × length` entries;
 * positions that are not trainable response tokens have mask 0, so the reducers (whose weights are
 * `mask / denominator`) see exactly the packed batch's trainable tokens.
 */
export interface MicroBatch {
  spans: SampleSpan[];
  rows: number;
  length: number;
  inputSlots: Int32Array;
  /** Target output class per padded position; 0 where the position is not trained. */
  targetClasses: Int32Array;
  /** The padded batch the policy loss reads. */
  lossBatch: PolicyLossBatch;
}

function invalid(message: string, details: Record<string, unknown> = {}): DressageError {
  return new DressageError({ code: 'invalid_argument', message, details });
}

/**
 * Locates every sample and checks it fits the model: at most `contextLength + 1` tokens (a full
 * pass reads all tokens but the last), and no trainable first token (nothing predicts it).
 */
export function sampleSpans(batch: PackedTrainBatch, contextLength: number): SampleSpan[] {
  const spans: SampleSpan[] = [];
  let tokenOffset = 0;
  let responseOffset = 0;
  for (let sample = 0; sample < batch.sample_count; sample++) {
    const totalLength = batch.total_lengths[sample]!;
    const responseLength = batch.response_lengths[sample]!;
    if (totalLength - 1 > contextLength) {
      throw invalid(
        `sample ${sample} has ${totalLength} tokens, but the embedded model reads at most ${contextLength + 1} tokens per sample (context length ${contextLength})`,
        { sample, total_length: totalLength, context_length: contextLength },
      );
    }
    if (responseLength === totalLength && responseLength > 0 && batch.loss_masks[responseOffset] === 1) {
      throw invalid(`sample ${sample} trains its first token, which no earlier token predicts`, { sample });
    }
    spans.push({ sample, tokenOffset, totalLength, responseLength, responseOffset });
    tokenOffset += totalLength;
    responseOffset += responseLength;
  }
  return spans;
}

/**
 * Splits the samples that have response tokens into groups whose padded size (rows × longest row)
 * stays within `maxTokens`; a sample larger than that forms a group of its own. Samples are grouped
 * in order of length, so short rows (e.g. the answer segment of a tool conversation) are not padded
 * to the longest row of the batch: padding is computed and thrown away.
 */
export function planMicroBatches(spans: readonly SampleSpan[], maxTokens: number): SampleSpan[][] {
  const groups: SampleSpan[][] = [];
  let current: SampleSpan[] = [];
  let longest = 0;
  const byLength = spans
    .filter((span) => span.responseLength > 0)
    .sort((left, right) => left.totalLength - right.totalLength || left.sample - right.sample);
  for (const span of byLength) {
    const positions = span.totalLength - 1;
    const widened = Math.max(longest, positions);
    if (current.length > 0 && (current.length + 1) * widened > maxTokens) {
      groups.push(current);
      current = [];
      longest = 0;
    }
    current.push(span);
    longest = Math.max(longest, positions);
  }
  if (current.length > 0) groups.push(current);
  return groups;
}

/**
 * Builds a micro-batch's padded inputs and loss columns. Response token `j` of a sample with
 * `total` tokens and `response` response tokens sits at position `p = total − response + j` and is
 * predicted at padded position `p − 1`.
 * @throws DressageError `invalid_argument` when a trainable token is outside the model's vocabulary
 * (the model can never produce it: a sure sign of misaligned tokens).
 */
export function buildMicroBatch(
  model: CausalLanguageModel,
  batch: PackedTrainBatch,
  spans: SampleSpan[],
): MicroBatch {
  const prepared = model.prepareBatch(
    spans.map((span) => batch.tokens.subarray(span.tokenOffset, span.tokenOffset + span.totalLength)),
  );
  const { length } = prepared;
  const rows = spans.length;
  const size = rows * length;
  const lossMasks = new Uint8Array(size);
  const rolloutLogProbs = batch.rollout_log_probs === null ? null : new Float32Array(size);
  const targetClasses = new Int32Array(size);
  spans.forEach((span, row) => {
    const promptLength = span.totalLength - span.responseLength;
    for (let token = 0; token < span.responseLength; token++) {
      const position = promptLength + token;
      if (position === 0) continue;
      const index = row * length + position - 1;
      const mask = batch.loss_masks[span.responseOffset + token]!;
      if (rolloutLogProbs !== null) {
        rolloutLogProbs[index] = batch.rollout_log_probs![span.responseOffset + token]!;
      }
      if (mask === 0) continue;
      const target = prepared.targetClasses[index]!;
      if (target < 0) {
        const tokenId = batch.tokens[span.tokenOffset + position]!;
        throw invalid(
          `sample ${span.sample}: trainable token ${tokenId} at position ${position} is outside the model's vocabulary`,
          { sample: span.sample, position, token_id: tokenId },
        );
      }
      lossMasks[index] = 1;
      targetClasses[index] = target;
    }
  });
  const pick = <T extends Int32Array | Float32Array | Float64Array>(
    source: T,
    create: (size: number) => T,
  ): T => {
    const out = create(rows);
    spans.forEach((span, row) => {
      out[row] = source[span.sample]!;
    });
    return out;
  };
  return {
    spans,
    rows,
    length,
    inputSlots: prepared.inputSlots,
    targetClasses,
    lossBatch: {
      sample_count: rows,
      response_lengths: new Int32Array(rows).fill(length),
      loss_masks: lossMasks,
      rollout_log_probs: rolloutLogProbs,
      rewards: pick(batch.rewards, (count) => new Float32Array(count)),
      rollout_mask_sums: pick(batch.rollout_mask_sums, (count) => new Float64Array(count)),
      rollout_ids: pick(batch.rollout_ids, (count) => new Int32Array(count)),
    },
  };
}

/** Trainable tokens of a packed batch. */
export function trainableTokenCount(batch: PackedTrainBatch): number {
  let count = 0;
  for (const mask of batch.loss_masks) count += mask;
  return count;
}
