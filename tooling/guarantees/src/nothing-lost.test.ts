// Nothing lost: a trajectory the proxy answered 200 for is readable after the proxy dies.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EngineStub } from './engine-stub.js';
import { chatBody, startQwenEngineStub, temporaryDirectory } from './fixtures.js';
import { call, startProxyProcess } from './proxy-process.js';

let engine: EngineStub;
beforeAll(async () => {
  engine = await startQwenEngineStub();
});
afterAll(async () => {
  await engine?.close();
});

describe('nothing lost', () => {
  it('a finalized trajectory survives SIGKILL of the proxy and reads back after a restart', async () => {
    const store = temporaryDirectory();
    try {
      const first = await startProxyProcess(engine.url, ['--store-dir', store.path]);
      let before: unknown;
      try {
        const chat = await call(first.url, '/v1/chat/completions', chatBody('hello'), {
          'x-session-id': 'kept',
        });
        expect(chat.status).toBe(200);
        expect((await call(first.url, '/session/finalize', { session_id: 'kept' })).status).toBe(200);
        before = (await call(first.url, '/trajectory/read', { trajectory_id: 'kept' })).body.data;
      } finally {
        await first.kill();
      }
      const second = await startProxyProcess(engine.url, ['--store-dir', store.path]);
      try {
        const after = await call(second.url, '/trajectory/read', { trajectory_id: 'kept' });
        expect(after.body.data).toEqual(before);
        expect((after.body.data as unknown[]).length).toBeGreaterThan(0);
      } finally {
        await second.kill();
      }
    } finally {
      store.remove();
    }
  });
});
