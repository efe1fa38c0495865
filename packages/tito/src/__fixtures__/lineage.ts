// Replays a generated conversation through TITO the way the proxy does, turn by turn.
import type { ChatMessage, Tool } from '@dressage/protocol';
import type { ContextDelta, TitoEncoder } from '../tito-encoder.js';

/** One replayed assistant step. */
export interface ReplayedStep {
  /** The request the model answered (ends before the assistant turn). */
  request: ChatMessage[];
  /** The ids the "model" produced for its turn, ending with `<|im_end|>`. */
  outputIds: Int32Array;
  /** The context delta appended after this step, or null for the last step. */
  delta: ContextDelta | null;
  /** The request after this step's appended messages (null for the last step). */
  nextRequest: ChatMessage[] | null;
}

/** Splits a conversation into requests: each ends right before an assistant turn. */
export function assistantIndexes(messages: readonly ChatMessage[]): number[] {
  return messages.flatMap((message, index) => (message.role === 'assistant' ? [index] : []));
}

/**
 * Replays `messages` with TITO. The model's output for each assistant turn is the renderer's text
 * for that turn (minus the generation prompt and the final newline), encoded by `encodeOutput`
 * (default: the tokenizer's own encoding). Returns the stitched ids and every step.
 */
export function replayLineage(
  encoder: TitoEncoder,
  messages: readonly ChatMessage[],
  tools: readonly Tool[] | null,
  encodeOutput: (text: string) => Int32Array = (text) => encoder.tokenizer.encode(text),
): { ids: Int32Array; steps: ReplayedStep[] } {
  const indexes = assistantIndexes(messages);
  const steps: ReplayedStep[] = [];
  const firstRequest = messages.slice(0, indexes[0]);
  let ids = encoder.encodeFull(firstRequest, { tools, addGenerationPrompt: true });
  for (let step = 0; step < indexes.length; step++) {
    const index = indexes[step]!;
    const request = messages.slice(0, index);
    const before = encoder.render(request, { tools, addGenerationPrompt: true });
    const after = encoder.render(messages.slice(0, index + 1), { tools });
    if (!after.startsWith(before) || !after.endsWith('\n')) {
      throw new Error(`assistant turn ${index} does not extend the generation prompt`);
    }
    const outputIds = encodeOutput(after.slice(before.length, -1));
    ids = concat(ids, outputIds);
    const nextIndex = indexes[step + 1] ?? messages.length;
    let delta: ContextDelta | null = null;
    let nextRequest: ChatMessage[] | null = null;
    if (nextIndex > index + 1) {
      nextRequest = messages.slice(0, nextIndex);
      delta = encoder.encodeIncremental({
        prefixIds: ids,
        baseMessages: messages.slice(0, index + 1),
        messages: nextRequest,
      });
      ids = concat(ids, delta.ids);
    }
    steps.push({ request, outputIds, delta, nextRequest });
  }
  return { ids, steps };
}

/** Concatenates two id arrays. */
export function concat(left: Int32Array, right: Int32Array): Int32Array {
  const result = new Int32Array(left.length + right.length);
  result.set(left, 0);
  result.set(right, left.length);
  return result;
}
