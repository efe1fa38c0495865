// The host end of a blackbox slot's upstream socket: only the model routes pass, pinned to the
// slot's session, with the proxy key added on the host; streams pass through as they are written.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startUpstreamGate, type UpstreamGate } from './upstream-gate.js';

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** One HTTP call over a unix socket; `onFirstChunk` sees the first body bytes as they arrive. */
function callOverSocket(
  socketPath: string,
  method: string,
  path: string,
  options: { headers?: Record<string, string>; body?: string; onFirstChunk?: (text: string) => void } = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const sent = request(
      { socketPath, method, path, headers: { 'content-type': 'application/json', ...options.headers } },
      (response) => {
        let text = '';
        response.on('data', (chunk: Buffer) => {
          if (text === '') options.onFirstChunk?.(chunk.toString('utf8'));
          text += chunk.toString('utf8');
        });
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
      },
    );
    sent.on('error', reject);
    sent.end(options.body);
  });
}

describe('startUpstreamGate', () => {
  let directory: string;
  let socketPath: string;
  let upstream: Server;
  let seen: Seen[];
  let session: string | null;
  let gate: UpstreamGate;
  // Lets the upstream finish a stream once the test has seen its first event.
  let finishStream: () => void;

  beforeEach(async () => {
    directory = mkdtempSync(join(tmpdir(), 'paddock-gate-'));
    socketPath = join(directory, 'upstream.sock');
    seen = [];
    session = 'slot-session';
    upstream = createServer((incoming, response) => {
      let body = '';
      incoming.on('data', (chunk: Buffer) => {
        body += chunk.toString('utf8');
      });
      incoming.on('end', () => {
        seen.push({
          method: incoming.method ?? '',
          url: incoming.url ?? '',
          headers: incoming.headers,
          body,
        });
        if (JSON.parse(body || '{}').stream === true) {
          response.writeHead(200, { 'content-type': 'text/event-stream' });
          response.write('data: {"first":true}\n\n');
          finishStream = () => response.end('data: [DONE]\n\n');
          return;
        }
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ upstream: incoming.url }));
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    gate = await startUpstreamGate({
      listen: { path: socketPath },
      target: { host: '127.0.0.1', port: (upstream.address() as AddressInfo).port },
      sessionOf: () => session,
      apiKey: 'proxy-key',
    });
  });
  afterEach(async () => {
    await gate.close();
    upstream.closeAllConnections();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
    rmSync(directory, { recursive: true, force: true });
  });

  it("refuses every route of the recording proxy but the model's, and passes none of them on", async () => {
    expect(statSync(socketPath).mode & 0o777).toBe(0o600);
    const forbidden: [string, string][] = [
      ['POST', '/session/finalize'],
      ['POST', '/session/discard'],
      ['POST', '/trajectory/read'],
      ['GET', '/trajectory/stats'],
      ['POST', '/v1/rollout/pause'],
      ['POST', '/v1/rollout/resume'],
      ['GET', '/integration/capabilities'],
      ['GET', '/v1/chat/completions'],
      ['POST', '/v1/chat/completions/../../session/finalize'],
      ['POST', '/v1/chat%2Fcompletions'],
    ];
    for (const [method, path] of forbidden) {
      const body = method === 'POST' ? '{"session_id":"slot-session"}' : undefined;
      const answer = await callOverSocket(socketPath, method, path, { body });
      expect(answer.status, `${method} ${path}`).toBe(403);
      expect(JSON.parse(answer.body).error).toMatchObject({ code: 'route_not_allowed' });
    }
    expect(seen).toEqual([]);
  });

  it("refuses another session's id, and every call while the slot is not leased", async () => {
    for (const header of ['x-session-id', 'x-smg-routing-key']) {
      const answer = await callOverSocket(socketPath, 'POST', '/v1/chat/completions', {
        headers: { [header]: 'someone-else' },
        body: '{}',
      });
      expect(answer.status).toBe(403);
      const error = JSON.parse(answer.body).error;
      expect(error.code).toBe('session_not_allowed');
      expect(error.message).toContain(header);
      expect(error.message).toContain('someone-else');
    }
    // A session base URL other than the slot's own, however it is spelled.
    for (const path of ['/s/someone-else/v1/chat/completions', '/s/slot%2Dsession%ZZ/v1/chat/completions']) {
      const answer = await callOverSocket(socketPath, 'POST', path, { body: '{}' });
      expect(answer.status, path).toBe(403);
      expect(JSON.parse(answer.body).error.code).toBe('session_not_allowed');
    }
    session = null;
    const unleased = await callOverSocket(socketPath, 'POST', '/v1/chat/completions', { body: '{}' });
    expect(unleased.status).toBe(403);
    expect(JSON.parse(unleased.body).error.code).toBe('slot_not_leased');
    expect(seen).toEqual([]);
  });

  it("passes a model call on under the slot's session with the proxy's key, not the caller's", async () => {
    const answer = await callOverSocket(socketPath, 'POST', '/v1/chat/completions?x=1', {
      headers: { authorization: 'Bearer agent-key', 'x-session-id': 'slot-session', 'x-turn-id': 't1' },
      body: '{"session_id":"someone-else","messages":[]}',
    });
    expect(answer).toEqual({ status: 200, body: '{"upstream":"/v1/chat/completions"}' });
    const models = await callOverSocket(socketPath, 'GET', '/v1/models');
    expect(models.status).toBe(200);
    // The slot's own session base URL is the same route; a trainer route under it is not.
    const based = await callOverSocket(socketPath, 'POST', '/s/slot%2Dsession/v1/chat/completions', {
      body: '{}',
    });
    expect(based.status).toBe(200);
    const finalize = await callOverSocket(socketPath, 'POST', '/s/slot-session/session/finalize', {
      body: '{}',
    });
    expect(finalize.status).toBe(403);
    expect(seen.map((request) => `${request.method} ${request.url}`)).toEqual([
      'POST /v1/chat/completions',
      'GET /v1/models',
      'POST /v1/chat/completions',
    ]);
    const [chat] = seen as [Seen];
    expect(chat.headers).toMatchObject({
      'x-session-id': 'slot-session',
      authorization: 'Bearer proxy-key',
      'x-turn-id': 't1',
    });
    expect(chat.body).toBe('{"session_id":"someone-else","messages":[]}');
  });

  it('streams a response through event by event, not after the upstream has finished', async () => {
    let first = '';
    const answer = callOverSocket(socketPath, 'POST', '/v1/chat/completions', {
      body: '{"stream":true}',
      onFirstChunk: (text) => {
        first = text;
        // Only now may the upstream finish: a buffering gate would never have delivered this.
        finishStream();
      },
    });
    expect(await answer).toEqual({ status: 200, body: 'data: {"first":true}\n\ndata: [DONE]\n\n' });
    expect(first).toBe('data: {"first":true}\n\n');
  });
});
