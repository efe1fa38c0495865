import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DressageError } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { ProxyClient, ProxyClientError } from './proxy-client.js';

const completion = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1,
  model: 'm',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
};

async function serve(statuses: number[], okBody?: unknown) {
  const seen: Array<{ path: string; headers: Record<string, unknown>; body: string }> = [];
  const server = createServer(async (request, response) => {
    let body = '';
    for await (const chunk of request) body += chunk;
    seen.push({ path: request.url ?? '', headers: request.headers, body });
    const status = statuses[Math.min(seen.length - 1, statuses.length - 1)]!;
    response.writeHead(status, { 'content-type': 'application/json' });
    const ok = okBody ?? (request.url === '/v1/chat/completions' ? completion : { ok: true });
    response.end(JSON.stringify(status === 200 ? ok : { detail: 'nope' }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, seen, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

describe('ProxyClient (§1.12)', () => {
  it('retries 503 with backoff and sends the id headers', async () => {
    const server = await serve([503, 503, 200]);
    try {
      const client = new ProxyClient({ baseUrl: server.url, backoffMs: 1, apiKey: 'k' });
      const result = await client.chatCompletions(
        { messages: [] },
        { sessionId: 's', instanceId: 'i', turnId: 't', expectedVersion: 'v9' },
      );
      expect(result).toEqual(completion);
      expect(result.choices[0]?.message.content).toBe('hi');
      expect(server.seen).toHaveLength(3);
      expect(server.seen[0]!.headers).toMatchObject({
        'x-session-id': 's',
        'x-instance-id': 'i',
        'x-turn-id': 't',
        'x-dressage-expected-version': 'v9',
        authorization: 'Bearer k',
      });
    } finally {
      await server.close();
    }
  });

  it('checks the shape of a completion and refuses one that does not fit, by field', async () => {
    const server = await serve([200], { ok: true });
    try {
      const client = new ProxyClient({ baseUrl: server.url });
      const error = await client
        .chatCompletions({ messages: [{ role: 'user', content: 'hi' }] }, { sessionId: 's', turnId: 't' })
        .catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(DressageError);
      expect((error as DressageError).message).toMatch(/answered a body of the wrong shape: id: /);
    } finally {
      await server.close();
    }
  });

  it('checks the shape of a trajectory read and refuses one that does not fit, by field', async () => {
    const server = await serve([200]);
    try {
      const client = new ProxyClient({ baseUrl: server.url });
      // The stub answers `{ok: true}`: no mode, no data.
      const error = await client.readTrajectory({ trajectoryId: 's' }).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(DressageError);
      expect((error as DressageError).code).toBe('internal');
      expect((error as DressageError).message).toContain(
        '/trajectory/read answered a body of the wrong shape',
      );
      expect((error as DressageError).message).toContain('mode');
    } finally {
      await server.close();
    }
  });

  it('names the code each status stands for, as every Dressage server maps it', async () => {
    const server = await serve([409, 401, 502]);
    try {
      const client = new ProxyClient({ baseUrl: server.url, backoffMs: 1 });
      const codes: unknown[] = [];
      for (let call = 0; call < 3; call++) {
        codes.push(await client.finalizeSession(`s${call}`).catch((caught: ProxyClientError) => caught.code));
      }
      expect(codes).toEqual(['aborted', 'unauthenticated', 'unavailable']);
    } finally {
      await server.close();
    }
  });

  it('does not retry other errors', async () => {
    const server = await serve([500, 200]);
    try {
      const client = new ProxyClient({ baseUrl: server.url, backoffMs: 1 });
      const error = await client.finalizeSession('s').catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(ProxyClientError);
      expect((error as ProxyClientError).status).toBe(500);
      expect((error as ProxyClientError).code).toBe('internal');
      expect(server.seen).toHaveLength(1);
      expect(JSON.parse(server.seen[0]!.body)).toEqual({ session_id: 's' });
    } finally {
      await server.close();
    }
  });

  it('retries connection errors, then gives up with unavailable', async () => {
    const server = await serve([200]);
    await server.close();
    const client = new ProxyClient({ baseUrl: server.url, backoffMs: 1, maxRetries: 2 });
    const error = await client.capabilities().catch((caught: unknown) => caught);
    expect((error as { code: string }).code).toBe('unavailable');
  });
});
