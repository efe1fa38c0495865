// Client errors are 4xx naming the field, never a 500 or a retryable 503, and the proxy keeps
// serving; limits (body time, engine time) end in a clear status instead of a wait.
import { request as httpRequest } from 'node:http';
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type Harness, startHarness } from './__fixtures__/harness.js';
import { ProxyClient } from './proxy-client.js';
import { maxJsonDepth } from './request-bytes.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const prompt = [{ role: 'user' as const, content: 'hi' }];

function chat(body: Record<string, unknown>, session = 's') {
  return harness!.call(
    'POST',
    '/v1/chat/completions',
    { messages: prompt, ...body },
    { 'x-session-id': session },
  );
}

// JSON text of a value nested `depth` levels of arrays deep (built as text: JSON.stringify itself
// cannot go that deep).
function nestedJson(depth: number): string {
  return `${'['.repeat(depth - 1)}"leaf"${']'.repeat(depth - 1)}`;
}

function chatText(messages: string, session = 's') {
  return harness!.call('POST', '/v1/chat/completions', `{"messages":${messages}}`, {
    'x-session-id': session,
  });
}

describe('client errors are not server errors', () => {
  it('answers top_k 0 or below -1 with 400 naming top_k; -1 still means no top-k', async () => {
    harness = await startHarness();
    for (const topK of [0, -5]) {
      const response = await chat({ top_k: topK });
      expect(response.status).toBe(400);
      expect(JSON.stringify(response.body)).toContain('top_k');
    }
    expect(harness!.engine.requests).toHaveLength(0);
    expect((await chat({ top_k: -1 })).status).toBe(200);
  });

  it('answers a deeply nested message with 400 naming it; the session still finalizes', async () => {
    harness = await startHarness();
    const deep = await chatText(`[{"role":"user","content":"hi","extra":${nestedJson(20_000)}}]`);
    expect(deep.status).toBe(400);
    expect(deep.body.detail).toContain('messages[0]');
    expect((await chat({})).status).toBe(200);
    // A continued body whose new message is too deep: the same 400, nothing recorded.
    const history = JSON.stringify([...prompt, { role: 'assistant', content: 'ok' }]).slice(0, -1);
    const appended = await chatText(`${history},{"role":"user","content":"x","extra":${nestedJson(5000)}}]`);
    expect(appended.status).toBe(400);
    expect(appended.body.detail).toContain('messages[2]');
    const label = await harness!.call(
      'POST',
      '/session/finalize',
      `{"session_id":"s","label":${nestedJson(5000)}}`,
    );
    expect(label.status).toBe(400);
    expect(label.body.detail).toContain('label');
    const finalized = await harness!.call('POST', '/session/finalize', { session_id: 's' });
    expect(finalized.status).toBe(200);
    expect(finalized.body.num_steps).toBe(1);
  });

  it(`accepts a body nested ${maxJsonDepth} levels deep end to end`, async () => {
    harness = await startHarness();
    // messages, its element, then the member: the deepest a member may go.
    const response = await chatText(
      `[{"role":"user","content":"hi","extra":${nestedJson(maxJsonDepth - 2)}}]`,
    );
    expect(response.status).toBe(200);
    expect((await harness!.call('POST', '/session/finalize', { session_id: 's' })).status).toBe(200);
  });

  it('answers session ids with control or non-Latin-1 characters with 400, not a retryable 503', async () => {
    harness = await startHarness();
    for (const id of ['bad\u0001id', 'セッション', 'x\u0085y']) {
      const response = await harness!.call('POST', '/v1/chat/completions', {
        messages: prompt,
        session_id: id,
      });
      expect(response.status).toBe(400);
      expect(response.body.detail).toContain('session_id');
      const finalize = await harness!.call('POST', '/session/finalize', { session_id: id });
      expect(finalize.status).toBe(400);
    }
    const turn = await harness!.call('POST', '/v1/chat/completions', {
      messages: prompt,
      turn_id: 'é\u0007',
    });
    expect(turn.status).toBe(400);
    expect(turn.body.detail).toContain('turn_id');
    expect(harness!.engine.requests).toHaveLength(0);
    // Latin-1 ids are fine.
    expect((await chat({}, 'café-1')).status).toBe(200);
  });

  it('ProxyClient refuses an id that cannot be a header at once, without sending or retrying', async () => {
    let connections = 0;
    const server = createServer((socket) => {
      connections += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    try {
      const client = new ProxyClient({ baseUrl: `http://127.0.0.1:${port}`, maxRetries: 3, backoffMs: 1 });
      for (const sessionId of ['セッション', 'a\u0001b']) {
        await expect(client.chatCompletions({ messages: prompt }, { sessionId })).rejects.toMatchObject({
          code: 'invalid_argument',
          message: expect.stringContaining('sessionId'),
        });
      }
      // A bad api key fails in fetch itself: not retried either.
      const badKey = new ProxyClient({
        baseUrl: `http://127.0.0.1:${port}`,
        apiKey: 'k\u0001',
        backoffMs: 1,
      });
      await expect(badKey.trajectoryStats()).rejects.toMatchObject({ code: 'invalid_argument' });
      expect(connections).toBe(0);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('what the engine sends back', () => {
  it('flags a null logprob instead of recording it as a real 0.0', async () => {
    harness = await startHarness();
    harness!.engine.script = () => ({ text: 'abc', logprobs: [-0.5, null, -0.25] });
    expect((await chat({})).status).toBe(200);
    expect((await harness!.call('POST', '/session/finalize', { session_id: 's' })).status).toBe(200);
    const lineage = await harness!.call('POST', '/trajectory/read', {
      trajectory_id: 's',
      segment_view: 'lineage',
    });
    const timeline = await harness!.call('POST', '/trajectory/read', {
      trajectory_id: 's',
      segment_view: 'timeline',
    });
    expect(lineage.body.data[0].extra_info.tito_logprobs_invalid).toBe(true);
    expect(timeline.body.data[0].extra_info.snapshot_logprobs_invalid).toBe(true);
    // A well-formed answer is not flagged.
    harness!.engine.script = () => ({ text: 'abc' });
    expect((await chat({}, 'clean')).status).toBe(200);
    await harness!.call('POST', '/session/finalize', { session_id: 'clean' });
    const clean = await harness!.call('POST', '/trajectory/read', { trajectory_id: 'clean' });
    expect(clean.body.data[0].extra_info.tito_logprobs_invalid).toBeUndefined();
  });

  it('answers 504 naming the setting when the engine hangs past --engine-request-timeout', async () => {
    harness = await startHarness({ config: { engineRequestTimeoutSeconds: 0.3 } });
    harness!.engine.script = () => ({ hang: true });
    const response = await chat({});
    expect(response.status).toBe(504);
    expect(JSON.stringify(response.body)).toContain('--engine-request-timeout');
    harness!.engine.script = () => ({ text: 'ok' });
    expect((await chat({}, 'next')).status).toBe(200);
  });
});

describe('request limits', () => {
  it('answers a body that trickles in past --request-body-timeout with 408 and keeps serving', async () => {
    harness = await startHarness({ config: { requestBodyTimeoutSeconds: 0.3 } });
    const url = new URL(`${harness!.url}/v1/chat/completions`);
    const status = await new Promise<number>((resolve, reject) => {
      const request = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          headers: { 'content-type': 'application/json', 'content-length': '1000', 'x-session-id': 'slow' },
        },
        (response) => {
          response.resume();
          resolve(response.statusCode ?? 0);
        },
      );
      request.on('error', reject);
      request.write('{"messages": [');
      // ... and never the rest.
    });
    expect(status).toBe(408);
    expect((await chat({})).status).toBe(200);
  });
});
