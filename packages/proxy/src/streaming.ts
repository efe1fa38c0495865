import {
  type ChatCompletionChunk,
  type ChatCompletionResponse,
  toStreamErrorFrame,
} from '@dressage/protocol';
import { sseComment, sseDoneFrame, sseFrame } from '@dressage/protocol/http';

/** The comment frame a heartbeat stream sends while generation runs. */
export const HEARTBEAT_FRAME = sseComment('dressage-heartbeat');

const sliceLength = 8;

function slices(text: string): string[] {
  const parts: string[] = [];
  const characters = Array.from(text);
  for (let index = 0; index < characters.length; index += sliceLength) {
    parts.push(characters.slice(index, index + sliceLength).join(''));
  }
  return parts;
}

/**
 * The frames of a pseudo-stream (§1.3): role, reasoning and content in 8-character slices, one
 * chunk per tool call, the finish chunk, the usage chunk (unless disabled) and `[DONE]`.
 */
export function completionToFrames(completion: ChatCompletionResponse, includeUsage: boolean): string[] {
  const choice = completion.choices[0]!;
  const base = {
    id: completion.id,
    object: 'chat.completion.chunk' as const,
    created: completion.created,
    model: completion.model,
  };
  type Choice = ChatCompletionChunk['choices'][number];
  const frames: string[] = [];
  const push = (delta: Choice['delta'], finishReason: Choice['finish_reason']) => {
    const chunk: ChatCompletionChunk = {
      ...base,
      choices: [{ index: 0, delta, finish_reason: finishReason }],
    };
    if (includeUsage) chunk.usage = null;
    frames.push(sseFrame(chunk));
  };
  push({ role: 'assistant' }, null);
  for (const part of slices(choice.message.reasoning_content ?? '')) push({ reasoning_content: part }, null);
  for (const part of slices(choice.message.content ?? '')) push({ content: part }, null);
  for (const call of choice.message.tool_calls ?? []) {
    push(
      {
        tool_calls: [
          {
            index: call.index,
            id: call.id,
            type: 'function',
            function: { name: call.function.name, arguments: call.function.arguments },
          },
        ],
      },
      null,
    );
  }
  push({}, choice.finish_reason);
  if (includeUsage) frames.push(sseFrame({ ...base, choices: [], usage: completion.usage }));
  frames.push(sseDoneFrame);
  return frames;
}

/** The frame that reports a failure after a heartbeat stream already answered 200. */
export function errorFrame(status: number, body: unknown): string {
  return sseFrame(toStreamErrorFrame(status, body));
}
