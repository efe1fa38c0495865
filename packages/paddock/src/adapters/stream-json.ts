// The `--output-format stream-json` lines Claude Code prints in print mode: one JSON event a line.
// Assistant events carry text, thinking and tool_use blocks; user events carry tool_result blocks;
// the last `result` event says how the run ended.
import { z } from 'zod';
import type { BlackboxMessage } from '../blackbox/schemas.js';

const blockSchema = z.looseObject({
  type: z.string(),
  text: z.string().optional().catch(undefined),
  thinking: z.string().optional().catch(undefined),
  id: z.string().optional().catch(undefined),
  name: z.string().optional().catch(undefined),
  input: z.unknown().optional(),
  tool_use_id: z.string().optional().catch(undefined),
  content: z.unknown().optional(),
});

/** One stream-json event; fields the conversion does not read pass through unread. */
export const streamJsonEventSchema = z.looseObject({
  type: z.string(),
  subtype: z.string().optional().catch(undefined),
  message: z
    .looseObject({ content: z.array(blockSchema).catch([]) })
    .optional()
    .catch(undefined),
  result: z.string().optional().catch(undefined),
  is_error: z.boolean().optional().catch(undefined),
  num_turns: z.number().optional().catch(undefined),
  error: z.unknown().optional(),
});

/** One stream-json event. */
export type StreamJsonEvent = z.infer<typeof streamJsonEventSchema>;

/** The `result` event: how the run ended (`success`, `error_max_turns`, `error_during_execution`). */
export type StreamJsonResult = StreamJsonEvent & { type: 'result' };

// The events of a run's stdout in order; lines that are not JSON events (a partial last line, a
// warning) are skipped.
function* events(stdout: string): Generator<StreamJsonEvent> {
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      continue;
    }
    const parsed = streamJsonEventSchema.safeParse(value);
    if (parsed.success) yield parsed.data;
  }
}

/** The last `result` event of a run, or null when it printed none. */
export function streamJsonResult(stdout: string): StreamJsonResult | null {
  let result: StreamJsonResult | null = null;
  for (const event of events(stdout)) if (event.type === 'result') result = event as StreamJsonResult;
  return result;
}

/** Converts a run's stream-json events into chat messages, and returns its final `result` text. */
export function streamJsonToChat(stdout: string): { outputs: BlackboxMessage[]; result: string | null } {
  const outputs: BlackboxMessage[] = [];
  let result: string | null = null;
  for (const event of events(stdout)) {
    const blocks = event.message?.content ?? [];
    if (event.type === 'assistant') {
      const text = blocks.map((block) => (block.type === 'text' ? (block.text ?? '') : '')).join('');
      const thinking = blocks
        .map((block) => (block.type === 'thinking' ? (block.thinking ?? '') : ''))
        .join('');
      const calls = blocks.filter((block) => block.type === 'tool_use');
      if (text === '' && thinking === '' && calls.length === 0) continue;
      const assistant: BlackboxMessage = { role: 'assistant', content: text };
      if (thinking !== '') assistant.reasoning_content = thinking;
      if (calls.length > 0) {
        assistant.tool_calls = calls.map((block) => ({
          id: block.id ?? '',
          type: 'function',
          function: { name: block.name ?? '', arguments: JSON.stringify(block.input ?? {}) },
        }));
      }
      outputs.push(assistant);
    } else if (event.type === 'user') {
      for (const block of blocks) {
        if (block.type !== 'tool_result') continue;
        outputs.push({
          role: 'tool',
          tool_call_id: block.tool_use_id ?? '',
          content: typeof block.content === 'string' ? block.content : JSON.stringify(block.content ?? ''),
        });
      }
    } else if (event.type === 'result' && event.result !== undefined) {
      result = event.result;
    }
  }
  return { outputs, result };
}
