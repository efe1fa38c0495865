// The messages of an opencode session as `GET /session/{id}/message` answers them (info + parts),
// and their conversion into the chat messages of a trajectory.
import { z } from 'zod';
import type { BlackboxMessage } from '../blackbox/schemas.js';

// A part of a message; part types the conversion does not read (step markers, patches) pass unread.
const partSchema = z.looseObject({
  type: z.string(),
  id: z.string().optional().catch(undefined),
  text: z.string().optional().catch(undefined),
  callID: z.string().optional().catch(undefined),
  tool: z.string().optional().catch(undefined),
  state: z
    .looseObject({
      input: z.unknown().optional(),
      output: z.unknown().optional(),
      error: z.unknown().optional(),
    })
    .optional()
    .catch(undefined),
});

/** One message of an opencode session: its info (role, ...) and its parts. */
export const opencodeMessageSchema = z.looseObject({
  info: z.looseObject({ role: z.string() }),
  parts: z.array(partSchema).catch([]),
});

/** One message of an opencode session. */
export type OpencodeMessage = z.infer<typeof opencodeMessageSchema>;

/** Converts opencode session messages to chat messages: replies, tool calls, tool results. */
export function opencodeMessagesToChat(messages: readonly OpencodeMessage[]): BlackboxMessage[] {
  const out: BlackboxMessage[] = [];
  for (const message of messages) {
    if (message.info.role !== 'assistant') continue;
    const { parts } = message;
    const text = parts.map((part) => (part.type === 'text' ? (part.text ?? '') : '')).join('');
    const reasoning = parts.map((part) => (part.type === 'reasoning' ? (part.text ?? '') : '')).join('');
    const tools = parts.filter((part) => part.type === 'tool');
    if (text === '' && reasoning === '' && tools.length === 0) continue;
    const assistant: BlackboxMessage = { role: 'assistant', content: text };
    if (reasoning !== '') assistant.reasoning_content = reasoning;
    if (tools.length > 0) {
      assistant.tool_calls = tools.map((part) => ({
        id: part.callID ?? part.id ?? '',
        type: 'function',
        function: { name: part.tool ?? '', arguments: JSON.stringify(part.state?.input ?? {}) },
      }));
    }
    out.push(assistant);
    for (const part of tools) {
      const output = part.state?.output ?? part.state?.error ?? '';
      out.push({
        role: 'tool',
        tool_call_id: part.callID ?? part.id ?? '',
        name: part.tool ?? '',
        content: typeof output === 'string' ? output : JSON.stringify(output),
      });
    }
  }
  return out;
}
