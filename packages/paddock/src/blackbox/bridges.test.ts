import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { responsesRequestToChat, writeAnthropicStream } from './bridges.js';

describe('Responses bridge', () => {
  it('gives a re-sent reasoning item back to the assistant turn that follows it', () => {
    const chat = responsesRequestToChat({
      model: 'm',
      input: [
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'write it' }] },
        { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'The shell writes it.' }] },
        { type: 'function_call', call_id: 'c1', name: 'exec_command', arguments: '{"cmd":"echo"}' },
        { type: 'function_call_output', call_id: 'c1', output: 'ok' },
        { type: 'reasoning', id: 'rs_2', summary: [{ type: 'summary_text', text: 'Done.' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Written.' }] },
      ],
    });
    expect(chat.messages).toEqual([
      { role: 'user', content: 'write it' },
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'The shell writes it.',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'exec_command', arguments: '{"cmd":"echo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'ok' },
      { role: 'assistant', content: 'Written.', reasoning_content: 'Done.' },
    ]);
  });
});

describe('bridge streams', () => {
  it('replays a Messages reply as named events, each carrying its name as type', async () => {
    const server = createServer((_request, response) =>
      writeAnthropicStream(response, {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: 'm',
        content: [{ type: 'text', text: 'hi' }],
        stop_reason: 'end_turn',
        usage: { input_tokens: 3, output_tokens: 1 },
      }),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
      expect(response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
      const events = (await response.text())
        .split('\n\n')
        .filter((frame) => frame !== '')
        .map((frame) => {
          const [event, data] = frame.split('\n');
          return [
            event?.slice('event: '.length),
            (JSON.parse(data!.slice('data: '.length)) as { type: string }).type,
          ];
        });
      expect(events.map(([event]) => event)).toEqual([
        'message_start',
        'content_block_start',
        'content_block_delta',
        'content_block_stop',
        'message_delta',
        'message_stop',
      ]);
      expect(events.every(([event, type]) => event === type)).toBe(true);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
