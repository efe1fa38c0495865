import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { DressageError } from '../errors.js';
import { httpStatusOf } from './http-error.js';
import { sendJson } from './json-reply.js';
import { readBody } from './request-body.js';
import { RouteTable } from './route-table.js';
import { type ServeHandler, serve } from './serve.js';

let server: Server | null = null;

async function listen(listener: Parameters<typeof createServer>[1]): Promise<string> {
  server = createServer(listener);
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server === null ? resolve() : server.close(() => resolve())));
  server = null;
});

const onError = (error: unknown, _request: unknown, response: Parameters<ServeHandler>[1]) =>
  sendJson(response, httpStatusOf(error), {
    error: DressageError.isInstance(error) ? error.code : 'internal',
    message: error instanceof Error ? error.message : String(error),
    details: DressageError.isInstance(error) ? error.details : {},
  });

describe('serve', () => {
  it('runs the matched handler with its parameters, and answers route misses and failures through onError', async () => {
    const routes = new RouteTable<ServeHandler>()
      .add('GET', '/v1/items/{item}', (_, response, { item }) => sendJson(response, 200, { item }))
      .add('POST', '/v1/items', async () => {
        throw new DressageError({ code: 'already_exists', message: 'taken' });
      })
      .add('GET', '/v1/boom', () => {
        throw new Error('boom');
      });
    const url = await listen(serve(routes, { onError }));
    const item = await fetch(`${url}/v1/items/a%20b`);
    expect([item.status, await item.json()]).toEqual([200, { item: 'a b' }]);
    const taken = await fetch(`${url}/v1/items`, { method: 'POST', body: '{}' });
    expect([taken.status, ((await taken.json()) as { error: string }).error]).toEqual([
      409,
      'already_exists',
    ]);
    const boom = await fetch(`${url}/v1/boom`);
    expect([boom.status, ((await boom.json()) as { message: string }).message]).toEqual([500, 'boom']);
    const missing = await fetch(`${url}/v2/nothing`, { method: 'POST', body: 'x'.repeat(100_000) });
    expect([missing.status, await missing.json()]).toEqual([
      404,
      { error: 'not_found', message: 'No route /v2/nothing', details: { path: '/v2/nothing' } },
    ]);
    const wrongMethod = await fetch(`${url}/v1/items`, { method: 'DELETE' });
    expect([wrongMethod.status, ((await wrongMethod.json()) as { details: unknown }).details]).toEqual([
      405,
      { path: '/v1/items', allowed: ['POST'] },
    ]);
  });

  it('hands route misses to notFound, which may answer them itself, body included', async () => {
    const routes = new RouteTable<ServeHandler>().add('GET', '/health', (_, response) =>
      sendJson(response, 200, { ok: true }),
    );
    const url = await listen(
      serve(routes, {
        onError,
        notFound: async (request, response, miss) => {
          const body = await readBody(request, { limit: 1024 });
          sendJson(response, 200, { passed: request.url, kind: miss.kind, bytes: body.length });
        },
      }),
    );
    expect(await (await fetch(`${url}/health`)).json()).toEqual({ ok: true });
    const passed = await fetch(`${url}/v1/anything?x=1`, { method: 'POST', body: 'hello' });
    expect(await passed.json()).toEqual({ passed: '/v1/anything?x=1', kind: 'not_found', bytes: 5 });
  });

  it("calls a server's own handler shape through invoke", async () => {
    const routes = new RouteTable<{ auth: boolean; answer: string }>()
      .add('GET', '/open', { auth: false, answer: 'open' })
      .add('GET', '/closed', { auth: true, answer: 'closed' });
    const url = await listen(
      serve(routes, {
        onError,
        invoke: (route, request, response) => {
          if (route.auth && request.headers.authorization !== 'Bearer k')
            throw new DressageError({ code: 'unauthenticated', message: 'no key' });
          sendJson(response, 200, { answer: route.answer });
        },
      }),
    );
    expect(await (await fetch(`${url}/open`)).json()).toEqual({ answer: 'open' });
    expect((await fetch(`${url}/closed`)).status).toBe(401);
    const keyed = await fetch(`${url}/closed`, { headers: { authorization: 'Bearer k' } });
    expect(await keyed.json()).toEqual({ answer: 'closed' });
  });
});
