import { request } from 'node:http';
import {
  contextOverflowBodySchema,
  proxyErrorDetailSchema,
  streamErrorFrameSchema,
} from '@dressage/protocol';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { type Harness, startHarness } from './__fixtures__/harness.js';
import type { ProxyConfig } from './config.js';

let harness: Harness;
afterEach(async () => {
  await harness?.close();
});

const prompt = [{ role: 'user', content: 'hi' }];
// The fake template renders `<user>hi<assistant>`: 19 prompt tokens.
const P = 19;

async function chat(
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = { 'x-session-id': 's' },
) {
  return harness.call('POST', '/v1/chat/completions', { messages: prompt, ...extra }, headers);
}

async function maxNewTokensFor(config: Partial<ProxyConfig>, extra: Record<string, unknown> = {}) {
  harness = await startHarness({ config });
  harness.engine.script = () => ({ text: 'abc' });
  const response = await chat(extra);
  return { response, sent: harness.engine.requests[0]?.body.sampling_params.max_new_tokens };
}

describe('context budget (§1.3)', () => {
  it('clamps to the window minus one: cw = P+7 gives 6', async () => {
    const { response, sent } = await maxNewTokensFor({ contextWindow: P + 7 });
    expect(response.status).toBe(200);
    expect(sent).toBe(6);
  });

  it('cw = P+2 with max_tokens 3 gives 1', async () => {
    const { sent } = await maxNewTokensFor({ contextWindow: P + 2 }, { max_tokens: 3 });
    expect(sent).toBe(1);
  });

  it('cw = P+1 is a 413 input_output without calling the engine', async () => {
    const { response } = await maxNewTokensFor({ contextWindow: P + 1 });
    expect(response.status).toBe(413);
    const body = contextOverflowBodySchema.parse(response.body);
    expect(body.details).toMatchObject({
      phase: 'input_output',
      context_window: P + 1,
      input_tokens: P,
      last_proxy_step_recorded: false,
    });
    expect(harness.engine.requests).toHaveLength(0);
  });

  it('a prompt at the window is a 413 input', async () => {
    const { response } = await maxNewTokensFor({ contextWindow: P });
    expect(response.status).toBe(413);
    expect(response.body.error).toBe('context_overflow');
    expect(response.body.details.phase).toBe('input');
    expect(response.body.details.session_id).toBe('s');
  });

  it('caps by the smaller of max_tokens and --max-output-tokens, and omits the limit without either', async () => {
    expect((await maxNewTokensFor({ maxOutputTokens: 5 }, { max_tokens: 9 })).sent).toBe(5);
    await harness.close();
    expect((await maxNewTokensFor({}, { max_tokens: 4 })).sent).toBe(4);
    await harness.close();
    expect((await maxNewTokensFor({})).sent).toBeUndefined();
    await harness.close();
    expect((await maxNewTokensFor({ contextWindow: P + 50, dynamicMaxTokens: false })).sent).toBeUndefined();
  });

  it('output overflow discards the tokens, records an empty step and answers 413', async () => {
    harness = await startHarness({ config: { contextWindow: P + 4 } });
    harness.engine.script = () => ({ text: 'much too long', ignoreMaxNewTokens: true });
    const response = await chat();
    expect(response.status).toBe(413);
    expect(response.body.details).toMatchObject({
      phase: 'input_output',
      output_tokens: 13,
      last_proxy_step_recorded: true,
    });
    const finalized = await harness.call('POST', '/session/finalize', { session_id: 's' });
    expect(finalized.body.num_steps).toBe(1);
    const read = await harness.call('POST', '/trajectory/read', {
      trajectory_id: 's',
      segment_view: 'timeline',
    });
    expect(read.body.data[0].tokens).toHaveLength(P);
    expect(read.body.data[0].finish_reason).toBe('length');
    expect(read.body.data[0].messages.at(-1)).toEqual({ role: 'assistant', content: '' });
  });
});

describe('error payloads (§1.4) and bad input', () => {
  it('requires the bearer key everywhere but /health', async () => {
    harness = await startHarness({ config: { apiKey: 'secret' } });
    expect((await harness.call('GET', '/health')).status).toBe(200);
    const denied = await harness.call('GET', '/trajectory/stats');
    expect(denied).toEqual({ status: 401, body: { detail: 'Unauthorized' } });
    expect(
      (await harness.call('GET', '/trajectory/stats', undefined, { authorization: 'Bearer secret' })).status,
    ).toBe(200);
    const wrongKey = new OpenAI({ baseURL: `${harness.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    const viaSdk = await wrongKey.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'x' }] })
      .catch((error) => error);
    expect(viaSdk).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(viaSdk.status).toBe(401);
    const ok = await harness.openai.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(ok.choices[0]?.message.content).toBe('ok');
  });

  it('answers malformed JSON, wrong types and missing fields with 400 naming the field', async () => {
    harness = await startHarness();
    const malformed = await harness.call('POST', '/v1/chat/completions', '{"messages": [', {});
    expect(malformed.status).toBe(400);
    expect(malformed.body.detail).toMatch(/Malformed JSON/);
    const wrongType = await harness.call('POST', '/v1/chat/completions', {
      messages: [{ role: 'user', content: 5 }],
    });
    expect(wrongType.status).toBe(400);
    expect(wrongType.body.detail).toMatch(/messages\[0\]\.content/);
    const badTemperature = await harness.call('POST', '/v1/chat/completions', {
      messages: prompt,
      temperature: 'hot',
    });
    expect(badTemperature.status).toBe(400);
    expect(badTemperature.body.detail).toMatch(/temperature/);
    const badView = await harness.call('POST', '/trajectory/read', {
      trajectory_id: 'x',
      segment_view: 'sideways',
    });
    expect(badView.status).toBe(400);
    expect(badView.body.detail).toMatch(/segment_view/);
    const noSession = await harness.call('POST', '/session/finalize', {});
    expect(noSession.status).toBe(400);
    expect(noSession.body.detail).toMatch(/session_id/);
    expect((await harness.call('GET', '/nowhere')).status).toBe(404);
    expect((await harness.call('GET', '/v1/chat/completions')).status).toBe(405);
    // Still serving after all of that.
    harness.engine.script = () => ({ text: 'fine' });
    expect((await chat()).status).toBe(200);
  });

  it('refuses a body over the limit with 413 and keeps serving', async () => {
    harness = await startHarness({ config: { maxRequestBytes: 1024 } });
    const huge = await harness.call('POST', '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'x'.repeat(5000) }],
    });
    expect(huge.status).toBe(413);
    expect(huge.body.detail).toMatch(/exceeds/);
    expect((await chat()).status).toBe(200);
  });

  it('refuses a chat body over 4 MiB by default, naming the flag that raises it', async () => {
    harness = await startHarness();
    // 4 MiB of history is already past any context the proxy serves; handling a new session's
    // body that size holds every other call for about a second.
    const body = Buffer.from(
      JSON.stringify({ messages: [{ role: 'user', content: 'word '.repeat((4 * 1024 ** 2) / 5 + 1) }] }),
    );
    // The answer comes from the declared length while the body is still on its way (the proxy
    // drains the rest, so the write does not meet a reset): read the answer as it comes.
    const over = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const sent = request(
        `${harness.proxy.url}/v1/chat/completions`,
        { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': body.length } },
        (response) => {
          let text = '';
          response.on('data', (chunk: Buffer) => {
            text += chunk.toString();
          });
          response.on('end', () => resolve({ status: response.statusCode ?? 0, text }));
        },
      );
      sent.on('error', (error) => setTimeout(() => reject(error), 1000));
      sent.end(body);
    });
    expect(over.status).toBe(413);
    expect(over.text).toMatch(/exceeds the limit of 4194304 bytes \(--max-request-mb\)/);
    expect((await chat()).status).toBe(200);
  });

  it('finalize: 404 unknown, 400 build-mode keys, idempotent repeats, 409 on reuse', async () => {
    harness = await startHarness();
    expect((await harness.call('POST', '/session/finalize', { session_id: 'nope' })).status).toBe(404);
    await chat();
    const modeKey = await harness.call('POST', '/session/finalize', {
      session_id: 's',
      token_build_mode: 'snapshot',
    });
    expect(modeKey.status).toBe(400);
    expect(modeKey.body.detail).toMatch(/token_build_mode/);
    const [first, second] = await Promise.all([
      harness.call('POST', '/session/finalize', { session_id: 's', label: 'gold' }),
      harness.call('POST', '/session/finalize', { session_id: 's' }),
    ]);
    expect(first.status).toBe(200);
    expect(second.body.finalization_id).toBe(first.body.finalization_id);
    const again = await harness.call('POST', '/session/finalize', { session_id: 's' });
    expect(again.body.finalization_id).toBe(first.body.finalization_id);
    const reuse = await chat();
    expect(reuse).toEqual({ status: 409, body: { detail: 'Session s has already been finalized.' } });
    const read = await harness.call('POST', '/trajectory/read', { trajectory_id: 's' });
    expect(read.body.data).toHaveLength(1);
    expect(read.body.data[0].label).toBe('gold');
  });

  it('refuses the step past DRESSAGE_PROXY_MAX_STEPS_PER_SESSION without finalizing', async () => {
    harness = await startHarness({ config: { maxStepsPerSession: 1 } });
    expect((await chat()).status).toBe(200);
    const refused = await chat();
    expect(refused).toEqual({
      status: 400,
      body: { detail: 'Session s reached proxy step limit (1). Refusing further inference.' },
    });
    expect((await harness.call('POST', '/session/finalize', { session_id: 's' })).body.num_steps).toBe(1);
  });

  it('maps engine failures: HTTP error → 500, connection refused → 503 sglang_upstream_unavailable', async () => {
    harness = await startHarness();
    harness.engine.script = () => ({ status: 500, body: 'boom' });
    const failed = await chat();
    expect(failed.status).toBe(500);
    expect(failed.body.detail).toMatch(/HTTP 500/);
    await harness.engine.close();
    const down = await chat();
    expect(down.status).toBe(503);
    expect(proxyErrorDetailSchema.parse(down.body.detail).error).toBe('sglang_upstream_unavailable');
    const models = await harness.call('GET', '/v1/models');
    expect(models.body).toEqual({
      object: 'list',
      data: [{ id: 'proxy-model', object: 'model', owned_by: 'proxy' }],
    });
  });

  it('a failed call records nothing: the session finalizes with only the good steps', async () => {
    harness = await startHarness();
    harness.engine.script = (_request, index) => (index === 1 ? { status: 502 } : { text: 'good' });
    expect((await chat()).status).toBe(200);
    expect((await chat()).status).toBe(500);
    expect((await harness.call('POST', '/session/finalize', { session_id: 's' })).body.num_steps).toBe(1);
  });

  it('serializes concurrent requests of one session and records every one', async () => {
    harness = await startHarness();
    harness.engine.script = () => ({ text: 'slow', tokenDelayMs: 2 });
    const responses = await Promise.all([chat(), chat(), chat()]);
    expect(responses.map((response) => response.status)).toEqual([200, 200, 200]);
    expect((await harness.call('POST', '/session/finalize', { session_id: 's' })).body.num_steps).toBe(3);
  });

  it('discard of a finalized session removes it and its segments, and nothing on a repeat', async () => {
    harness = await startHarness();
    await chat();
    await harness.call('POST', '/session/finalize', { session_id: 's' });
    const discarded = await harness.call('POST', '/session/discard', { session_id: 's' });
    expect(discarded.body).toEqual({
      success: true,
      session_id: 's',
      session_removed: true,
      segments_removed: 2,
      tool_call_hook_keys_purged: 0,
    });
    const twice = await harness.call('POST', '/session/discard', { session_id: 's' });
    expect(twice.body).toMatchObject({ session_removed: false, segments_removed: 0 });
    await chat({}, { 'x-session-id': 'live' });
    expect(
      (await harness.call('POST', '/session/discard', { session_id: 'live' })).body.session_removed,
    ).toBe(true);
    expect((await harness.call('POST', '/session/finalize', { session_id: 'live' })).status).toBe(404);
  });

  it('finalize of a session without steps is a 400', async () => {
    harness = await startHarness({ config: { contextWindow: 5 } });
    expect((await chat()).status).toBe(413);
    const empty = await harness.call('POST', '/session/finalize', { session_id: 's' });
    expect(empty).toEqual({ status: 400, body: { detail: 'Session has no turns' } });
  });

  it('expires idle sessions after --session-timeout', async () => {
    harness = await startHarness({ config: { sessionTimeoutSeconds: 60 } });
    await chat();
    expect(harness.proxy.service.activeSessions).toBe(1);
    harness.proxy.service.expireIdle(Date.now() + 61_000);
    expect(harness.proxy.service.activeSessions).toBe(0);
    expect((await harness.call('POST', '/session/finalize', { session_id: 's' })).status).toBe(404);
  });
});

describe('streaming (§1.3)', () => {
  it('pseudo-streams reasoning, content and the usage chunk; include_usage false drops usage', async () => {
    harness = await startHarness();
    harness.engine.script = () => ({ text: 'thinking hard</think>\n\nthe answer is 42<|im_end|>' });
    const response = await fetch(`${harness.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-session-id': 's' },
      body: JSON.stringify({ messages: prompt, stream: true }),
    });
    expect(response.headers.get('content-type')).toMatch(/text\/event-stream/);
    expect(response.headers.get('cache-control')).toBe('no-cache, no-transform');
    expect(response.headers.get('x-accel-buffering')).toBe('no');
    const frames = (await response.text()).split('\n\n').filter(Boolean);
    expect(frames.at(-1)).toBe('data: [DONE]');
    const chunks = frames.slice(0, -1).map((frame) => JSON.parse(frame.slice('data: '.length)));
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant' });
    expect(chunks[0].usage).toBeNull();
    const reasoning = chunks.map((chunk) => chunk.choices[0]?.delta.reasoning_content ?? '').join('');
    const content = chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('');
    expect(reasoning).toBe('thinking hard');
    expect(content).toBe('the answer is 42');
    expect(chunks.some((chunk) => (chunk.choices[0]?.delta.content ?? '').length > 8)).toBe(false);
    expect(chunks.at(-2).choices[0].finish_reason).toBe('stop');
    expect(chunks.at(-1)).toMatchObject({
      choices: [],
      usage: { completion_tokens: 'thinking hard</think>\n\nthe answer is 42<|im_end|>'.length },
    });

    const noUsage = await harness.call('POST', '/v1/chat/completions', {
      messages: prompt,
      stream: true,
      stream_options: { include_usage: false },
    });
    expect(noUsage.body).not.toMatch(/"usage"/);
  });

  it('heartbeats while generation runs and reports a late failure as an error frame', async () => {
    harness = await startHarness({ config: { streamHeartbeatIntervalSeconds: 0.02 } });
    harness.engine.script = () => ({ hang: true });
    const response = await fetch(`${harness.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-session-id': 'hb' },
      body: JSON.stringify({ messages: prompt, stream: true }),
    });
    expect(response.status).toBe(200);
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = decoder.decode((await reader.read()).value);
    expect(text.startsWith(': dressage-heartbeat\n\n')).toBe(true);
    // The generation fails after the 200 went out: a pause preempts it on a non-partial proxy.
    await harness.proxy.service.controller.pause({ reason: 'test', mode: 'preempt' });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value);
    }
    const errorLine = text.split('\n\n').find((frame) => frame.startsWith('data: {'));
    const frame = streamErrorFrameSchema.parse(JSON.parse(errorLine!.slice(6)));
    expect(frame.error).toMatchObject({
      type: 'dressage_proxy_error',
      code: 'generation_preempted',
      status_code: 502,
    });
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('a fast failure in a heartbeat stream keeps its real status', async () => {
    harness = await startHarness({ config: { streamHeartbeatIntervalSeconds: 5, contextWindow: 10 } });
    const response = await harness.call('POST', '/v1/chat/completions', { messages: prompt, stream: true });
    expect(response.status).toBe(413);
  });
});
