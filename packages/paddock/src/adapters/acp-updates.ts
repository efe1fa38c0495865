// The `session/update` notifications an Agent Client Protocol agent sends while it works on a prompt,
// and their conversion into the chat messages of a trajectory.
import { z } from 'zod';
import type { BlackboxMessage } from '../blackbox/schemas.js';

// A content block; only text blocks carry what the conversion reads.
const contentBlockSchema = z.looseObject({ type: z.string(), text: z.string().optional().catch(undefined) });

/**
 * One `session/update`: message and thought chunks (`content` a block), tool calls and their
 * updates (`content` a list of tool-call contents). Kinds the conversion does not read
 * (`available_commands_update`, plans, ...) pass through unread.
 */
export const acpSessionUpdateSchema = z.looseObject({
  sessionUpdate: z.string(),
  content: z
    .union([
      contentBlockSchema,
      z.array(z.looseObject({ content: contentBlockSchema.optional().catch(undefined) })),
    ])
    .optional()
    .catch(undefined),
  toolCallId: z.string().optional(),
  title: z.string().nullish(),
  status: z.string().nullish(),
  rawInput: z.unknown().optional(),
  _meta: z
    .looseObject({ toolName: z.string().optional().catch(undefined) })
    .nullish()
    .catch(undefined),
});

/** One `session/update` of an ACP agent. */
export type AcpSessionUpdate = z.infer<typeof acpSessionUpdateSchema>;

type ContentBlock = z.infer<typeof contentBlockSchema>;

const textOf = (block: ContentBlock | undefined): string =>
  block?.type === 'text' ? (block.text ?? '') : '';

const hasKeys = (value: unknown): boolean =>
  value !== null && typeof value === 'object' && Object.keys(value).length > 0;

/**
 * Converts the `session/update`s of one ACP prompt into chat messages: the agent's text (and
 * thoughts) up to a tool call become an assistant message carrying the calls, each finished call a
 * tool message, and the text after the last call the final assistant message.
 */
export function acpUpdatesToChat(updates: readonly AcpSessionUpdate[]): BlackboxMessage[] {
  const out: BlackboxMessage[] = [];
  let text = '';
  let reasoning = '';
  let calls: { id: string; name: string; input: unknown }[] = [];
  const results: BlackboxMessage[] = [];
  // The input a call's later update reports (qwen-code sends the call first with an empty one).
  const inputs = new Map<string, unknown>();
  const flush = () => {
    if (text === '' && reasoning === '' && calls.length === 0) return;
    const message: BlackboxMessage = { role: 'assistant', content: text };
    if (reasoning !== '') message.reasoning_content = reasoning;
    if (calls.length > 0)
      message.tool_calls = calls.map((call) => ({
        id: call.id,
        type: 'function',
        function: { name: call.name, arguments: JSON.stringify(inputs.get(call.id) ?? call.input ?? {}) },
      }));
    out.push(message, ...results);
    text = '';
    reasoning = '';
    calls = [];
    results.length = 0;
  };
  for (const update of updates) {
    const kind = update.sessionUpdate;
    const block = Array.isArray(update.content) ? undefined : update.content;
    if (kind === 'agent_message_chunk' || kind === 'agent_thought_chunk') {
      // Text after a tool's result starts the next assistant message.
      if (results.length > 0) flush();
      if (kind === 'agent_message_chunk') text += textOf(block);
      else reasoning += textOf(block);
    } else if (kind === 'tool_call') {
      if (results.length > 0) flush();
      calls.push({
        id: update.toolCallId ?? '',
        name: update._meta?.toolName ?? update.title ?? '',
        input: update.rawInput,
      });
    } else if (kind === 'tool_call_update') {
      const id = update.toolCallId ?? '';
      if (hasKeys(update.rawInput)) inputs.set(id, update.rawInput);
      if (update.status === 'completed' || update.status === 'failed') {
        const contents = Array.isArray(update.content) ? update.content : [];
        results.push({
          role: 'tool',
          tool_call_id: id,
          content: contents.map((item) => textOf(item.content)).join(''),
        });
      }
    }
  }
  flush();
  return out;
}
