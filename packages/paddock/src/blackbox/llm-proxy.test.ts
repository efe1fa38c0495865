import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import { RolloutLlmProxy } from './llm-proxy.js';
import { proxyOptionsSchema } from './schemas.js';

describe('RolloutLlmProxy request bodies', () => {
  let model: ScriptedModelServer;
  let proxy: RolloutLlmProxy;

  beforeAll(async () => {
    model = new ScriptedModelServer(() => ({ content: 'ok' }));
    await model.start();
    proxy = new RolloutLlmProxy({
      upstreamOrigin: model.url,
      apiPath: '/v1',
      sessionId: 'bodies-1',
      instanceId: 'instance-1',
      proxy: proxyOptionsSchema.parse({}),
      maxRequestBytes: 2048,
    });
    await proxy.start();
  });
  afterAll(async () => {
    await proxy.close();
    await model.close();
  });

  const chat = (content: string) =>
    fetch(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }] }),
    });

  it('answers a body over its limit with 413 naming the limit, without calling upstream, and keeps serving', async () => {
    const before = model.requests.length;
    const tooLarge = await chat('x'.repeat(4096));
    expect(tooLarge.status).toBe(413);
    const body = (await tooLarge.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe('request_too_large');
    expect(body.error.message).toContain('exceeds the limit of 2048 bytes');
    expect(model.requests.length).toBe(before);
    const ok = await chat('hello');
    expect(ok.status).toBe(200);
    expect(model.requests.length).toBe(before + 1);
  });
});

describe('RolloutLlmProxy bindings of a kept agent', () => {
  let model: ScriptedModelServer;
  let proxy: RolloutLlmProxy;

  beforeAll(async () => {
    model = new ScriptedModelServer(() => ({ content: 'ok' }));
    await model.start();
    proxy = new RolloutLlmProxy({
      upstreamOrigin: model.url,
      apiPath: '/v1',
      sessionId: 'sample-a',
      instanceId: 'instance-a',
      proxy: proxyOptionsSchema.parse({}),
    });
    await proxy.start();
  });
  afterAll(async () => {
    await proxy.close();
    await model.close();
  });

  const chat = (agentSession?: string, header = 'x-session-id') =>
    fetch(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(agentSession === undefined ? {} : { [header]: agentSession }),
      },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });

  it('attributes requests to the bound sample, refuses them between samples and from a stale agent session', async () => {
    expect((await chat('ses_a')).status).toBe(200);
    expect(model.requests.at(-1)?.headers).toMatchObject({
      'x-session-id': 'sample-a',
      'x-instance-id': 'instance-a',
    });
    const served = model.requests.length;

    proxy.unbind();
    const between = await chat('ses_a');
    expect(between.status).toBe(503);
    expect(((await between.json()) as { error: { code: string } }).error.code).toBe('unbound');
    expect(model.requests.length).toBe(served);

    proxy.rebind({ sessionId: 'sample-b', instanceId: 'instance-b', sandboxId: 'sandbox-b' });
    proxy.pinAgentSession('ses_b');
    const stale = await chat('ses_a');
    expect(stale.status).toBe(409);
    expect(((await stale.json()) as { error: { code: string } }).error.code).toBe('stale_agent_session');
    expect((await chat()).status).toBe(409);
    expect(model.requests.length).toBe(served);

    expect((await chat('ses_b')).status).toBe(200);
    expect(model.requests.length).toBe(served + 1);
    expect(model.requests.at(-1)?.headers).toMatchObject({
      'x-session-id': 'sample-b',
      'x-instance-id': 'instance-b',
      'x-dressage-sandbox-id': 'sandbox-b',
    });

    // An agent that names its session in another header (Codex: `thread-id`) is pinned by that one.
    proxy.rebind({ sessionId: 'sample-c', instanceId: 'instance-c', sandboxId: 'sandbox-c' });
    proxy.pinAgentSession('thread-c', 'Thread-Id');
    expect((await chat('thread-c')).status).toBe(409);
    expect((await chat('thread-b', 'thread-id')).status).toBe(409);
    expect((await chat('thread-c', 'thread-id')).status).toBe(200);
    expect(model.requests.length).toBe(served + 2);
  });
});
