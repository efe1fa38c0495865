// The thread items `codex app-server` reports (`item/completed` notifications) and their conversion
// into the chat messages of a trajectory. Item shapes: the app-server protocol's `ThreadItem`
// (`codex app-server generate-ts`, v2/ThreadItem.ts, Codex 0.171.0).
import { z } from 'zod';
import type { BlackboxMessage } from '../blackbox/schemas.js';

const text = z.string().nullish().catch(undefined);
const texts = z.array(z.string()).optional().catch(undefined);

/** One thread item; item types the conversion does not read pass unread. */
export const codexItemSchema = z.looseObject({
  type: z.string(),
  id: text,
  text,
  summary: texts,
  content: z.unknown().optional(),
  command: text,
  aggregatedOutput: text,
});

/** One thread item of `codex app-server`. */
export type CodexItem = z.infer<typeof codexItemSchema>;

/** The params of an `item/completed` notification. */
export const codexItemCompletedSchema = z.looseObject({
  threadId: z.string(),
  turnId: z.string().optional(),
  item: codexItemSchema,
});

/**
 * Converts a turn's completed items into chat messages: each command execution becomes a shell tool
 * call and its result, each agent message an assistant reply; reasoning goes to the next reply or
 * command. The user's own message is not an output.
 */
export function codexItemsToChat(items: readonly CodexItem[]): BlackboxMessage[] {
  const outputs: BlackboxMessage[] = [];
  let reasoning = '';
  const withReasoning = (message: BlackboxMessage): BlackboxMessage => {
    if (reasoning !== '') message.reasoning_content = reasoning;
    reasoning = '';
    return message;
  };
  for (const item of items) {
    const id = item.id ?? `item-${outputs.length}`;
    if (item.type === 'reasoning') {
      const parts = item.summary?.length ? item.summary : z.array(z.string()).catch([]).parse(item.content);
      reasoning += parts.join('\n');
    } else if (item.type === 'agentMessage') {
      outputs.push(withReasoning({ role: 'assistant', content: item.text ?? '' }));
    } else if (item.type === 'commandExecution') {
      const call = withReasoning({
        role: 'assistant',
        content: '',
        tool_calls: [
          {
            id,
            type: 'function',
            function: { name: 'shell', arguments: JSON.stringify({ command: item.command ?? '' }) },
          },
        ],
      });
      outputs.push(call, { role: 'tool', tool_call_id: id, content: item.aggregatedOutput ?? '' });
    }
  }
  return outputs;
}
