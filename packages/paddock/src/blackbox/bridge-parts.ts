// What the Messages and Responses bridges both read: text given as a string or as a list of parts,
// and the first choice of a chat completion.
import type { ChatCompletionResponse } from '@dressage/protocol';
import { z } from 'zod';

/** Text as a string or as a list of parts; parts without text (images, files) count as empty. */
export const textPartsSchema = z.union([
  z.string(),
  z.array(z.looseObject({ type: z.string().optional(), text: z.string().optional() })),
]);

/** Text given as a string or as a list of parts. */
export type TextParts = z.infer<typeof textPartsSchema>;

/** The text of a string or a list of parts, joined; empty when absent. */
export function partsText(content: TextParts | null | undefined): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  return content.map((part) => part.text ?? '').join('');
}

/** The message and finish reason of a completion's first choice. */
export function completionMessage(completion: ChatCompletionResponse): {
  message: ChatCompletionResponse['choices'][number]['message'];
  finish: ChatCompletionResponse['choices'][number]['finish_reason'];
} {
  // The schema guarantees at least one choice.
  const choice = completion.choices[0]!;
  return { message: choice.message, finish: choice.finish_reason };
}

/** Tool-call arguments as a value: the parsed JSON, or `{ raw }` when the model wrote no JSON. */
export function parseArgumentsText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return { raw: text };
  }
}
