import type { ChatMessage, PackedTrainBatch, Tool, TrainBatch } from '@dressage/protocol';
import { DressageError, packTrainBatch } from '@dressage/protocol';
import type { TitoEncoder } from '@dressage/tito';

/**
 * One supervised example: a conversation whose LAST message is the assistant reply to learn, and
 * the tools offered on that turn.
 */
export interface WarmStartExample {
  messages: ChatMessage[];
  tools?: Tool[];
}

/** Prompt and completion ids of an example, as the engine would see them at generation time. */
export interface SupervisedSequence {
  promptIds: Int32Array;
  completionIds: Int32Array;
  /** The full rendered text (prompt + completion), for building the vocabulary. */
  text: string;
}

/**
 * Encodes an example the way the proxy encodes a request: the prompt with the generation prompt,
 * then the reply as the model would emit it, ending at the end-of-turn token.
 */
export function encodeExample(encoder: TitoEncoder, example: WarmStartExample): SupervisedSequence {
  const last = example.messages.at(-1);
  if (last?.role !== 'assistant') {
    throw new DressageError({
      code: 'invalid_argument',
      message: 'a warm-start example must end with an assistant message',
    });
  }
  const context = example.messages.slice(0, -1);
  const options = { tools: example.tools ?? null };
  const promptText = encoder.render(context, { ...options, addGenerationPrompt: true });
  const fullText = encoder.render(example.messages, options);
  if (!fullText.startsWith(promptText)) {
    throw new DressageError({
      code: 'failed_precondition',
      message:
        'the renderer does not extend the generation prompt with the reply; cannot build a warm-start example',
    });
  }
  let completionText = fullText.slice(promptText.length);
  const endOfTurn = encoder.renderer.endOfTurn;
  const stop = completionText.lastIndexOf(endOfTurn);
  // The model stops at the end-of-turn token; the template's newline after it is context.
  if (stop >= 0) completionText = completionText.slice(0, stop + endOfTurn.length);
  return {
    promptIds: encoder.encodeFull(context, { ...options, addGenerationPrompt: true }),
    completionIds: encoder.tokenizer.encode(completionText),
    text: fullText,
  };
}

/** A supervised batch: every completion token trainable, one rollout per sequence. */
export function buildSupervisedBatch(sequences: readonly SupervisedSequence[]): PackedTrainBatch {
  const batch: TrainBatch = {
    tokens: [],
    response_lengths: [],
    rewards: [],
    raw_reward: [],
    truncated: [],
    sample_indices: [],
    rollout_ids: [],
    loss_masks: [],
    rollout_mask_sums: [],
    rollout_log_probs: [],
  };
  sequences.forEach((sequence, index) => {
    const completion = Array.from(sequence.completionIds);
    batch.tokens.push([...Array.from(sequence.promptIds), ...completion]);
    batch.response_lengths.push(completion.length);
    batch.loss_masks.push(completion.map(() => 1));
    batch.rollout_log_probs?.push(completion.map(() => 0));
    batch.rewards.push(1);
    batch.raw_reward.push(1);
    batch.truncated.push(0);
    batch.sample_indices.push(index);
    batch.rollout_ids.push(index);
    batch.rollout_mask_sums.push(completion.length);
  });
  return packTrainBatch(batch);
}

/** The warm-start settings that decide each step's learning rate. */
export interface WarmStartSchedule {
  steps: number;
  learning_rate: number;
  learning_rate_schedule: 'constant' | 'cosine';
  min_learning_rate: number;
}

/**
 * The learning rate of warm-start step `index` (0-based): `learning_rate` throughout, or a cosine
 * from `learning_rate` at the first step towards `min_learning_rate`, which it would reach one step
 * after the last.
 */
export function warmStartLearningRate(schedule: WarmStartSchedule, index: number): number {
  if (schedule.learning_rate_schedule === 'constant' || schedule.steps <= 1) return schedule.learning_rate;
  // The last step is one step short of the floor: a rate of 0 would be refused, and wasted.
  const progress = Math.min(1, Math.max(0, index / schedule.steps));
  const floor = Math.min(schedule.min_learning_rate, schedule.learning_rate);
  return floor + 0.5 * (schedule.learning_rate - floor) * (1 + Math.cos(Math.PI * progress));
}

/** What the trainer is asked for at warm-start step `index`: a supervised step at that step's rate. */
export function warmStartTrainOptionsOf(
  recipe: { warm_start: WarmStartSchedule },
  index: number,
): { rollout_id: number; loss: { loss_type: 'sft_loss'; learning_rate: number } } {
  return {
    rollout_id: index,
    loss: { loss_type: 'sft_loss', learning_rate: warmStartLearningRate(recipe.warm_start, index) },
  };
}
