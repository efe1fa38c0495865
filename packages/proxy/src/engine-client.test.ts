import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { EngineClient, type GenerateRequest } from './engine-client.js';
import { ProxyHttpError } from './http-error.js';

type Handler = (request: IncomingMessage, body: string, response: ServerResponse) => void;

let server: Server | null = null;
let client: EngineClient | null = null;

async function engine(handler: Handler): Promise<string> {
  server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => handler(request, Buffer.concat(chunks).toString('utf8'), response));
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const request: GenerateRequest = {
  input_ids: Int32Array.from([151644, 872, 198, 9707]),
  sampling_params: { temperature: 1, max_new_tokens: 8 },
  return_logprob: true,
  logprob_start_len: -1,
  return_text_in_logprobs: true,
  rid: 'rid-1',
};

/** The `detail` of a proxy error's JSON body. */
function detailOf(error: unknown): unknown {
  return ((error as ProxyHttpError).body as { detail: unknown }).detail;
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a failure');
    },
    (error: unknown) => error,
  );
}

afterEach(async () => {
  await client?.close();
  client = null;
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = null;
});

describe('EngineClient.generate', () => {
  it('posts the ids, sampling params and routing key, and decodes a body that arrives in pieces', async () => {
    let seen: { body: Record<string, unknown>; key: unknown; path: unknown } | null = null;
    const url = await engine((incoming, body, response) => {
      seen = { body: JSON.parse(body), key: incoming.headers['x-smg-routing-key'], path: incoming.url };
      const reply = JSON.stringify({
        text: 'Hi',
        output_ids: [13048, 151645],
        meta_info: {
          finish_reason: { type: 'stop' },
          weight_version: 'v3',
          output_token_logprobs: [
            [-0.5, 13048, 'Hi'],
            [-0.25, 151645, null],
          ],
        },
      });
      // Byte by byte over several writes, as a slow engine would flush it.
      response.writeHead(200, { 'content-type': 'application/json' });
      let offset = 0;
      const timer = setInterval(() => {
        response.write(reply.slice(offset, offset + 7));
        offset += 7;
        if (offset >= reply.length) {
          clearInterval(timer);
          response.end();
        }
      }, 1);
    });
    client = new EngineClient({ routerUrl: `${url}/` });
    const result = await client.generate(request, { routingKey: 'session-9' });
    expect(seen).toEqual({
      path: '/generate',
      key: 'session-9',
      body: {
        input_ids: [151644, 872, 198, 9707],
        sampling_params: { temperature: 1, max_new_tokens: 8 },
        return_logprob: true,
        logprob_start_len: -1,
        return_text_in_logprobs: true,
        rid: 'rid-1',
      },
    });
    expect(result.text).toBe('Hi');
    expect(Array.from(result.outputIds!)).toEqual([13048, 151645]);
    expect(Array.from(result.outputLogprobs)).toEqual([-0.5, -0.25]);
    expect(result.weightVersion).toBe('v3');
    expect(result.finishReason).toBe('stop');
  });

  it('keeps a router path prefix', async () => {
    let seen: { path: unknown; ids: unknown } | null = null;
    const url = await engine((incoming, body, response) => {
      seen = { path: incoming.url, ids: JSON.parse(body).input_ids };
      response.end('{"text":"","output_ids":[],"meta_info":{}}');
    });
    client = new EngineClient({ routerUrl: `${url}/router/v2` });
    await client.generate(request, { routingKey: 's' });
    expect(seen).toEqual({ path: '/router/v2/generate', ids: [151644, 872, 198, 9707] });
  });

  it('answers 500 with the start of the body on an HTTP error, and 500 on a body that is not JSON', async () => {
    let reply = { status: 503, body: `overloaded ${'x'.repeat(2000)}` };
    const url = await engine((_, __, response) => {
      response.writeHead(reply.status);
      response.end(reply.body);
    });
    client = new EngineClient({ routerUrl: url });
    const status = await failure(client.generate(request, { routingKey: 's' }));
    expect(status).toBeInstanceOf(ProxyHttpError);
    expect((status as ProxyHttpError).status).toBe(500);
    const detail = detailOf(status) as string;
    expect(detail.startsWith('SGLang /generate returned HTTP 503: overloaded xxx')).toBe(true);
    expect(detail.length).toBe('SGLang /generate returned HTTP 503: '.length + 500);
    reply = { status: 200, body: '{"text": "cut off' };
    const invalid = await failure(client.generate(request, { routingKey: 's' }));
    expect((invalid as ProxyHttpError).status).toBe(500);
    expect(detailOf(invalid)).toMatch(/^SGLang \/generate returned invalid JSON: /);
  });

  it('answers 503 sglang_upstream_unavailable when the engine is down or hangs up, 504 when it times out', async () => {
    let mode: 'hang-up' | 'silent' = 'hang-up';
    const url = await engine((incoming, _, response) => {
      if (mode === 'hang-up') incoming.socket.destroy();
      else response.flushHeaders(); // headers, then nothing: the body timeout fires
    });
    client = new EngineClient({ routerUrl: url, generateTimeoutSeconds: 0.2 });
    const upstream = (error: unknown) => detailOf(error) as { error: string; detail: string };
    const hungUp = await failure(client.generate(request, { routingKey: 's' }));
    expect((hungUp as ProxyHttpError).status).toBe(503);
    expect(upstream(hungUp).error).toBe('sglang_upstream_unavailable');
    mode = 'silent';
    const timedOut = await failure(client.generate(request, { routingKey: 's' }));
    expect((timedOut as ProxyHttpError).status).toBe(504);
    expect(detailOf(timedOut)).toMatchObject({
      error: 'sglang_upstream_timeout',
      message: expect.stringContaining('within 0.2 s (--engine-request-timeout)'),
    });
    await client.close();
    server!.closeAllConnections();
    await new Promise<void>((resolve) => server!.close(() => resolve()));
    server = null;
    client = new EngineClient({ routerUrl: url });
    const refused = await failure(client.generate(request, { routingKey: 's' }));
    expect(upstream(refused).error).toBe('sglang_upstream_unavailable');
    expect(upstream(refused).detail).toMatch(/ECONNREFUSED/);
  });

  it('aborts the engine request when the signal fires, and rejects at once on an aborted signal', async () => {
    let closed: Promise<void> | null = null;
    const url = await engine((incoming) => {
      closed = new Promise((resolve) => incoming.socket.once('close', () => resolve()));
    });
    client = new EngineClient({ routerUrl: url });
    const controller = new AbortController();
    const pending = failure(client.generate(request, { routingKey: 's', signal: controller.signal }));
    while (closed === null) await new Promise((resolve) => setTimeout(resolve, 2));
    controller.abort();
    const error = await pending;
    expect((error as Error).name).toBe('AbortError');
    await closed; // the engine saw its connection go
    const early = await failure(client.generate(request, { routingKey: 's', signal: controller.signal }));
    expect((early as Error).name).toBe('AbortError');
  });
});
