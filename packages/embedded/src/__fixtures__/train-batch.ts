// Test data for the trainer: packed batches built straight from token sequences, with rollout
// logprobs computed by a model (on-policy when it is the trainer's starting model).
import type { PackedTrainBatch } from '@dressage/protocol';
import type { TitoTokenizer } from '@dressage/tito';
import type { CausalLanguageModel } from '../model.js';
import { chatPrompt } from './embedded-fixture.js';

/** One sample: prompt + response ids, the response being the last `responseLength`. */
export interface TrainSequence {
  tokens: readonly number[];
  responseLength: number;
  /** Default 1. */
  reward?: number;
  /** Per response token; default all 1. */
  lossMask?: readonly number[];
  /** Default: the sample's index (one rollout per sample). */
  rolloutId?: number;
}

/** Packs sequences the way `convertSamplesToPackedTrainBatch` lays a batch out (trajectory-equal sums). */
export function packSequences(
  model: CausalLanguageModel | null,
  sequences: readonly TrainSequence[],
  temperature = 1,
): PackedTrainBatch {
  const count = sequences.length;
  const masks = sequences.map(
    (sequence) => sequence.lossMask ?? new Array<number>(sequence.responseLength).fill(1),
  );
  const rolloutIds = sequences.map((sequence, index) => sequence.rolloutId ?? index);
  const sums = new Map<number, number>();
  masks.forEach((mask, index) => {
    const total = mask.reduce((sum, value) => sum + value, 0);
    sums.set(rolloutIds[index]!, (sums.get(rolloutIds[index]!) ?? 0) + total);
  });
  const logprobs =
    model === null
      ? null
      : model.sequenceLogprobs(
          sequences.map((sequence) => sequence.tokens),
          temperature,
        );
  const rollout: number[] = [];
  sequences.forEach((sequence, index) => {
    const start = sequence.tokens.length - sequence.responseLength;
    for (let position = start; position < sequence.tokens.length; position++) {
      const value = logprobs === null || position === 0 ? 0 : logprobs[index]![position - 1]!;
      rollout.push(Number.isNaN(value) ? 0 : value);
    }
  });
  const rewards = sequences.map((sequence) => sequence.reward ?? 1);
  return {
    sample_count: count,
    tokens: Int32Array.from(sequences.flatMap((sequence) => [...sequence.tokens])),
    total_lengths: Int32Array.from(sequences.map((sequence) => sequence.tokens.length)),
    response_lengths: Int32Array.from(sequences.map((sequence) => sequence.responseLength)),
    loss_masks: Uint8Array.from(masks.flat()),
    rollout_log_probs: model === null ? null : Float32Array.from(rollout),
    teacher_log_probs: null,
    rollout_ids: Int32Array.from(rolloutIds),
    rewards: Float32Array.from(rewards),
    raw_rewards: Float32Array.from(rewards),
    rollout_mask_sums: Float64Array.from(rolloutIds.map((id) => sums.get(id)!)),
    truncated: new Uint8Array(count),
    sample_indices: Int32Array.from(sequences.map((_, index) => index)),
  };
}

/**
 * Four answers to the calculator question (one right, three not), each ending at `<|im_end|>`, as
 * sequences with the given rewards, and the prompt they share.
 */
export function calculatorAnswers(
  tokenizer: TitoTokenizer,
  rewards: readonly [number, number, number, number],
): { prompt: number[]; sequences: TrainSequence[] } {
  const end = tokenizer.requireTokenId('<|im_end|>');
  const prompt = Array.from(tokenizer.encode(chatPrompt('What is 12 + 30? Use the calculator.')));
  const answers = ['The answer is 42.', 'The answer is 7.', '42', 'The answer is 0 1 2.'];
  const sequences = answers.map((text, index) => {
    const response = [...tokenizer.encode(text), end];
    return { tokens: [...prompt, ...response], responseLength: response.length, reward: rewards[index] };
  });
  return { prompt, sequences };
}
