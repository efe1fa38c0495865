import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import {
  anthropicMessagesRequestSchema,
  anthropicRequestToChat,
  writeAnthropicStream,
} from './anthropic-messages.js';
import { RolloutLlmProxy } from './llm-proxy.js';
import { proxyOptionsSchema } from './schemas.js';

describe('Messages bridge', () => {
  it('turns thinking, tool use, tool results and system turns into chat messages in their order', () => {
    const request = anthropicMessagesRequestSchema.parse({
      model: 'm',
      max_tokens: 256,
      system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
      messages: [
        { role: 'user', content: 'list the files' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'The shell lists them.', signature: 's' },
            { type: 'text', text: 'Listing.' },
            { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'ls' } },
          ],
        },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 'toolu_1',
              content: [
                { type: 'text', text: 'a.txt' },
                { type: 'image', source: {} },
              ],
            },
            { type: 'text', text: 'and now?' },
          ],
        },
        {
          role: 'system',
          content: [{ type: 'text', text: '# Environment', cache_control: { type: 'ephemeral' } }],
        },
      ],
      tools: [{ name: 'Bash', description: 'runs a command', input_schema: { type: 'object' } }],
      stop_sequences: ['END'],
    });
    const chat = anthropicRequestToChat(request);
    expect(chat.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'list the files' },
      {
        role: 'assistant',
        content: 'Listing.',
        reasoning_content: 'The shell lists them.',
        tool_calls: [
          { id: 'toolu_1', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'toolu_1', content: 'a.txt' },
      { role: 'user', content: 'and now?' },
      { role: 'system', content: '# Environment' },
    ]);
    expect(chat).toMatchObject({ model: 'm', max_tokens: 256, stop: ['END'] });
    expect(chat.tools).toEqual([
      {
        type: 'function',
        function: { name: 'Bash', description: 'runs a command', parameters: { type: 'object' } },
      },
    ]);
  });

  it('names the field of a block that lacks what its type needs', () => {
    const result = anthropicMessagesRequestSchema.safeParse({
      messages: [{ role: 'assistant', content: [{ type: 'tool_use', name: 'Bash', input: {} }] }],
    });
    expect(result.success).toBe(false);
    expect(result.error?.issues.map((issue) => issue.path)).toEqual([['messages', 0, 'content', 0, 'id']]);
  });
});

describe('the Messages API through the LLM proxy', () => {
  let model: ScriptedModelServer;
  let proxy: RolloutLlmProxy;

  beforeAll(async () => {
    model = new ScriptedModelServer(() => ({
      content: 'Reading it.',
      reasoning: 'unused',
      tool_calls: [{ name: 'Read', arguments: { path: 'a.txt' } }],
    }));
    await model.start();
    proxy = new RolloutLlmProxy({
      upstreamOrigin: model.url,
      apiPath: '/v1',
      sessionId: 'messages-1',
      instanceId: 'instance-1',
      proxy: proxyOptionsSchema.parse({}),
    });
    await proxy.start();
  });
  afterAll(async () => {
    await proxy.close();
    await model.close();
  });

  const post = (body: unknown) =>
    fetch(`${proxy.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('answers a malformed request 400 in the Messages error shape, naming the field, without calling upstream', async () => {
    const before = model.requests.length;
    const response = await post({
      model: 'm',
      max_tokens: 16,
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'user', content: [{ type: 'tool_result', content: 'orphan' }] },
      ],
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe('error');
    expect(body.error.type).toBe('invalid_request_error');
    expect(body.error.message).toContain('messages[1].content[0].tool_use_id');
    expect(model.requests.length).toBe(before);
  });

  it('answers a good request with a Messages response carrying the tool call', async () => {
    const response = await post({
      model: 'claude-x',
      max_tokens: 16,
      messages: [{ role: 'user', content: 'read a.txt' }],
    });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { model: string; stop_reason: string; content: unknown[] };
    expect(body.model).toBe('claude-x');
    expect(body.stop_reason).toBe('tool_use');
    expect(body.content).toEqual([
      { type: 'text', text: 'Reading it.' },
      expect.objectContaining({ type: 'tool_use', name: 'Read', input: { path: 'a.txt' } }),
    ]);
    expect(model.requests.at(-1)?.body.messages).toEqual([{ role: 'user', content: 'read a.txt' }]);
  });
});

describe('Messages stream', () => {
  it('replays a Messages reply as named events, each carrying its name as type', async () => {
    const server = createServer((_request, response) =>
      writeAnthropicStream(response, {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: 'm',
        content: [{ type: 'text', text: 'hi' }],
        stop_reason: 'end_turn',
        stop_sequence: null,
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
