// A real proxy on loopback in front of an engine whose scheduler is stuck: it takes `/generate`
// and `/abort_request` but never returns the aborted request, so the proxy's pause cannot quiesce.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DressageError } from '@dressage/protocol';
import { createProxyConfig, ProxyClient, type ProxyServer, startProxyServer } from '@dressage/proxy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultTokenizerPath } from './embedded-stack.js';
import { parseRecipe } from './recipe.js';
import { type PauseSettings, pauseSettingsOf, publishWeights } from './weight-publish.js';

let engine: Server;
let proxy: ProxyServer;
let client: ProxyClient;
const held: ServerResponse[] = [];
const aborts: string[] = [];
let generates = 0;

beforeAll(async () => {
  engine = createServer(async (request, response) => {
    let text = '';
    for await (const chunk of request) text += chunk;
    const url = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;
    const json = (body: unknown) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    };
    if (request.url === '/workers')
      return json({ workers: [{ url, is_healthy: true, connection_mode: 'http' }] });
    if (request.url === '/abort_request') {
      aborts.push((JSON.parse(text) as { rid: string }).rid);
      return json({});
    }
    if (request.url === '/generate') {
      generates += 1;
      held.push(response);
      return;
    }
    response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => engine.listen(0, '127.0.0.1', resolve));
  proxy = await startProxyServer(
    createProxyConfig({
      tokenizerPath: defaultTokenizerPath(),
      tokenBuildModel: 'qwen3',
      sglangRouterUrl: `http://127.0.0.1:${(engine.address() as AddressInfo).port}`,
      host: '127.0.0.1',
      port: 0,
    }),
  );
  client = new ProxyClient({ baseUrl: proxy.url });
}, 60_000);

afterAll(async () => {
  for (const response of held) response.destroy();
  await proxy?.close();
  engine?.closeAllConnections();
  await new Promise((resolve) => engine?.close(resolve));
});

function recordingTrainer() {
  const calls: string[] = [];
  return {
    calls,
    async updateWeights() {
      calls.push('update');
      return { weight_version: String(calls.length + 1) } as never;
    },
  };
}

/** Starts an agent call that the stuck engine holds, and waits until the engine has it. */
async function generationInFlight(session: string): Promise<void> {
  const before = generates;
  void fetch(`${proxy.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-session-id': session },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
  }).catch(() => {});
  while (generates === before) await new Promise((resolve) => setTimeout(resolve, 10));
}

const required: PauseSettings = { aroundWeightUpdate: true, required: true, timeoutSeconds: 1 };

describe('publishWeights', () => {
  it('pauses, updates and resumes when nothing is in flight', async () => {
    const trainer = recordingTrainer();
    const published = await publishWeights(trainer, client, 'weight_update_after_rollout_0', required);
    expect(published).toEqual({ weightVersion: '2', paused: true, quiesced: true });
    expect(trainer.calls).toEqual(['update']);
    expect((await client.pauseState()).paused).toBe(false);
  });

  it('a required pause that does not quiesce leaves the weights alone and says why', async () => {
    await generationInFlight('stuck-1');
    const trainer = recordingTrainer();
    const error = await publishWeights(trainer, client, 'weight_update_after_rollout_3', required).catch(
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(DressageError);
    expect((error as DressageError).code).toBe('failed_precondition');
    expect((error as Error).message).toMatch(
      /^weight_update_after_rollout_3: the proxy pause did not quiesce within 1 s \(1 generation\(s\) still running/,
    );
    expect((error as Error).message).toContain('the weights were not updated');
    expect(trainer.calls).toEqual([]);
    expect(aborts.length).toBeGreaterThan(0);
    // The proxy is not left paused.
    expect((await client.pauseState()).paused).toBe(false);
  });

  it('not required: updates anyway and logs why; off: no pause at all', async () => {
    const trainer = recordingTrainer();
    const lines: string[] = [];
    const published = await publishWeights(
      trainer,
      client,
      'weight_update_after_rollout_4',
      { ...required, required: false },
      (line) => lines.push(line),
    );
    expect(published).toMatchObject({ paused: true, quiesced: false });
    expect(trainer.calls).toEqual(['update']);
    expect(lines.join('\n')).toMatch(/did not quiesce within 1 s .*updating weights anyway/);

    const abortsBefore = aborts.length;
    const unpaused = await publishWeights(trainer, client, 'weight_update_after_rollout_5', {
      ...required,
      aroundWeightUpdate: false,
    });
    expect(unpaused).toMatchObject({ paused: false, quiesced: false });
    expect(aborts.length).toBe(abortsBefore);
    expect(trainer.calls).toEqual(['update', 'update']);
  });

  it('a proxy that cannot be reached: required throws before the update, not required updates', async () => {
    const down = new ProxyClient({ baseUrl: 'http://127.0.0.1:9' });
    const trainer = recordingTrainer();
    await expect(publishWeights(trainer, down, 'resume', required)).rejects.toThrow();
    expect(trainer.calls).toEqual([]);
    await publishWeights(trainer, down, 'resume', { ...required, required: false });
    expect(trainer.calls).toEqual(['update']);
  });
});

describe('pause settings', () => {
  const recipe = (proxy: string) =>
    `name: p\noutput_dir: out\ndata: { path: d.jsonl }\ntraining: { steps: 1 }\nengine: { kind: sglang, router_url: "http://10.0.0.5:8000" }\ntrainer: { kind: grpc, address: "10.0.0.6:50051" }\n${proxy}`;

  it('the recipe key, else the environment, else the defaults', () => {
    expect(pauseSettingsOf(parseRecipe(recipe(''), 'r', {}))).toEqual({
      aroundWeightUpdate: true,
      required: true,
      timeoutSeconds: 300,
    });
    const env = {
      DRESSAGE_PROXY_PAUSE_AROUND_WEIGHT_UPDATE: '0',
      DRESSAGE_PROXY_PAUSE_REQUIRED: 'false',
      DRESSAGE_PROXY_PAUSE_TIMEOUT_SEC: '45',
    };
    expect(pauseSettingsOf(parseRecipe(recipe(''), 'r', env))).toEqual({
      aroundWeightUpdate: false,
      required: false,
      timeoutSeconds: 45,
    });
    const explicit = recipe('proxy: { pause_around_weight_update: true, pause_timeout_seconds: 7 }\n');
    expect(pauseSettingsOf(parseRecipe(explicit, 'r', env))).toEqual({
      aroundWeightUpdate: true,
      required: false,
      timeoutSeconds: 7,
    });
    expect(() => parseRecipe(recipe(''), 'r', { DRESSAGE_PROXY_PAUSE_TIMEOUT_SEC: 'soon' })).toThrow(
      /DRESSAGE_PROXY_PAUSE_TIMEOUT_SEC="soon" is not an integer/,
    );
    expect(() => parseRecipe(recipe('proxy: { pause_timeout_seconds: 0 }\n'), 'r', {})).toThrow(
      /pause_timeout_seconds/,
    );
  });
});
