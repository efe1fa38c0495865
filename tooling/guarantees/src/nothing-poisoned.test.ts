// Nothing poisoned: bad input is a clear 4xx naming the field, never a 500, never a NaN in the
// weights, and the server keeps serving afterwards.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EngineStub } from './engine-stub.js';
import { chatBody, startQwenEngineStub } from './fixtures.js';
import { call, type ProxyProcess, startProxyProcess } from './proxy-process.js';

let engine: EngineStub;
let proxy: ProxyProcess;
beforeAll(async () => {
  engine = await startQwenEngineStub();
  proxy = await startProxyProcess(engine.url, ['--store-dir', 'none']);
});
afterAll(async () => {
  await proxy?.kill();
  await engine?.close();
});

describe('nothing poisoned: the proxy', () => {
  it('answers a body that is not JSON with 400 and keeps serving', async () => {
    const bad = await call(proxy.url, '/v1/chat/completions', '{"messages": [', {
      'x-session-id': 'bad-json',
    });
    expect(bad.status).toBe(400);
    const good = await call(proxy.url, '/v1/chat/completions', chatBody('hi'), {
      'x-session-id': 'bad-json',
    });
    expect(good.status).toBe(200);
  });
});
