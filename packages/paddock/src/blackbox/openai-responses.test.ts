import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import { RolloutLlmProxy } from './llm-proxy.js';
import { responsesRequestSchema, responsesRequestToChat } from './openai-responses.js';
import { proxyOptionsSchema } from './schemas.js';

describe('Responses bridge', () => {
  it('gives a re-sent reasoning item back to the assistant turn that follows it', () => {
    const chat = responsesRequestToChat(
      responsesRequestSchema.parse({
        model: 'm',
        input: [
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'write it' }] },
          // As Codex re-sends it: absent fields written as null.
          {
            type: 'reasoning',
            id: 'rs_1',
            summary: [{ type: 'summary_text', text: 'The shell writes it.' }],
            content: null,
            encrypted_content: null,
          },
          { type: 'function_call', call_id: 'c1', name: 'exec_command', arguments: '{"cmd":"echo"}' },
          { type: 'function_call_output', call_id: 'c1', output: 'ok' },
          { type: 'reasoning', id: 'rs_2', summary: [{ type: 'summary_text', text: 'Done.' }] },
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Written.' }] },
        ],
      }),
    );
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

  it('maps developer instructions to system and keeps only function tools', () => {
    const chat = responsesRequestToChat(
      responsesRequestSchema.parse({
        instructions: 'Be brief.',
        input: [
          { type: 'message', role: 'developer', content: 'no network' },
          { role: 'user', content: 'go' },
        ],
        tools: [{ type: 'function', name: 'shell', parameters: { type: 'object' } }, { type: 'web_search' }],
        max_output_tokens: 64,
      }),
    );
    expect(chat.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'system', content: 'no network' },
      { role: 'user', content: 'go' },
    ]);
    expect(chat.tools).toEqual([
      { type: 'function', function: { name: 'shell', parameters: { type: 'object' } } },
    ]);
    expect(chat.max_tokens).toBe(64);
  });
});

describe('the Responses API through the LLM proxy', () => {
  let model: ScriptedModelServer;
  let proxy: RolloutLlmProxy;

  beforeAll(async () => {
    model = new ScriptedModelServer(() => ({
      content: '',
      tool_calls: [{ name: 'shell', arguments: { cmd: 'ls' } }],
    }));
    await model.start();
    proxy = new RolloutLlmProxy({
      upstreamOrigin: model.url,
      apiPath: '/v1',
      sessionId: 'responses-1',
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
    fetch(`${proxy.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('answers a malformed request 400 naming the field, without calling upstream', async () => {
    const before = model.requests.length;
    const response = await post({
      model: 'm',
      input: [
        { role: 'user', content: 'hi' },
        { type: 'function_call', name: 'shell', arguments: '{}' },
      ],
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe('invalid_request_error');
    expect(body.error.message).toContain('input[1].call_id');
    expect(model.requests.length).toBe(before);
  });

  it('answers a good request with a Responses response carrying the function call', async () => {
    const response = await post({ model: 'gpt-x', input: 'list the files' });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { object: string; model: string; output: unknown[] };
    expect(body).toMatchObject({ object: 'response', model: 'gpt-x' });
    expect(body.output).toEqual([
      expect.objectContaining({ type: 'function_call', name: 'shell', arguments: '{"cmd":"ls"}' }),
    ]);
  });
});
