// The JSON events `codex exec --json` prints, one a line, and their conversion into the chat
// messages of a trajectory.
import { z } from 'zod';
import type { BlackboxMessage } from '../blackbox/schemas.js';

const text = z.string().optional().catch(undefined);

/** One `codex exec --json` event; event and item types the conversion does not read pass unread. */
export const codexEventSchema = z.looseObject({
  type: z.string(),
  thread_id: text,
  message: text,
  error: z.looseObject({ message: text }).optional().catch(undefined),
  item: z
    .looseObject({ id: text, type: z.string(), text, command: text, aggregated_output: text })
    .optional()
    .catch(undefined),
});

/** One `codex exec --json` event. */
export type CodexEvent = z.infer<typeof codexEventSchema>;

function* events(stdout: string): Generator<CodexEvent> {
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      continue;
    }
    const parsed = codexEventSchema.safeParse(value);
    if (parsed.success) yield parsed.data;
  }
}

/**
 * Converts `codex exec --json` events into chat messages: each command execution becomes a shell
 * tool call and its result, each agent message an assistant reply. Returns the thread id and the
 * error a failed turn reported.
 */
export function codexEventsToChat(stdout: string): {
  outputs: BlackboxMessage[];
  threadId: string | null;
  error: string | null;
} {
  const outputs: BlackboxMessage[] = [];
  let threadId: string | null = null;
  let error: string | null = null;
  let reasoning = '';
  // Reasoning items belong to the next reply or command the model wrote after them.
  const withReasoning = (message: BlackboxMessage): BlackboxMessage => {
    if (reasoning !== '') message.reasoning_content = reasoning;
    reasoning = '';
    return message;
  };
  for (const event of events(stdout)) {
    if (event.type === 'thread.started' && event.thread_id !== undefined) threadId = event.thread_id;
    if (event.type === 'turn.failed' || event.type === 'error') {
      error = event.error?.message ?? event.message ?? JSON.stringify(event.error ?? event);
    }
    const item = event.type === 'item.completed' ? event.item : undefined;
    if (item === undefined) continue;
    const id = item.id ?? `item-${outputs.length}`;
    if (item.type === 'reasoning') reasoning += item.text ?? '';
    else if (item.type === 'agent_message') {
      outputs.push(withReasoning({ role: 'assistant', content: item.text ?? '' }));
    } else if (item.type === 'command_execution') {
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
      outputs.push(call, { role: 'tool', tool_call_id: id, content: item.aggregated_output ?? '' });
    }
  }
  return { outputs, threadId, error };
}
