// Routing replay (R3) end to end: an engine that reports routed experts, the real proxy recording
// them, the run's whitebox generate and conversion as a recipe with training.routing_replay sets
// them up, the TrainerService stream, and the Megatron worker's slime actor against the stand-ins of
// slime (apps/megatron-worker/tests/slime_stand_in.py), whose training actors record what slime's
// actor would read as rollout_routed_experts.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeGenerate, WhiteboxAgent, type WhiteboxRunContext } from '@dressage/paddock';
import { createSample, type Sample } from '@dressage/protocol';
import { createProxyConfig, ProxyClient, type ProxyServer, startProxyServer } from '@dressage/proxy';
import {
  convertSamplesToPackedTrainBatch,
  createTrainerClient,
  type TrainerClient,
} from '@dressage/trainer-bridge';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conversionOptionsOf, routingReplayOf } from './conversion-options.js';
import { defaultTokenizerPath } from './embedded-stack.js';
import { parseRecipe } from './recipe.js';

const LAYERS = 3;
const TOPK = 2;
const workerDirectory = join(dirname(fileURLToPath(import.meta.url)), '../../../megatron-worker');

/** The expert the engine routes token `id` to in `layer`, slot `slot` (ids above 255: uint16 on the wire). */
function expert(id: number, layer: number, slot: number): number {
  return (id * 7 + layer * 5 + slot * 3) % 1000;
}

let engine: Server;
let proxy: ProxyServer;
let worker: ChildProcess;
let trainer: TrainerClient;
let scratch: string;

// An SGLang engine as the proxy calls it: `/generate` answers three tokens with the routed experts
// of every position but the last (len(input + output) − 1 rows of layers × top-k int32, base64).
function startEngine(): Promise<void> {
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
    if (request.url === '/get_weight_version') return json({ weight_version: '1' });
    if (request.url !== '/generate') {
      response.writeHead(404).end();
      return;
    }
    const body = JSON.parse(text) as { input_ids: number[]; return_routed_experts?: boolean };
    // "Paris" and the end of the turn, in Qwen3's ids.
    const output = [59604, 151645];
    const all = [...body.input_ids, ...output];
    const experts = new Int32Array((all.length - 1) * LAYERS * TOPK);
    for (let row = 0; row < all.length - 1; row++)
      for (let layer = 0; layer < LAYERS; layer++)
        for (let slot = 0; slot < TOPK; slot++)
          experts[(row * LAYERS + layer) * TOPK + slot] = expert(all[row]!, layer, slot);
    json({
      text: 'Paris',
      output_ids: output,
      meta_info: {
        finish_reason: { type: 'stop', matched: 151645 },
        weight_version: '1',
        prompt_tokens: body.input_ids.length,
        completion_tokens: output.length,
        output_token_logprobs: output.map((id) => [-0.5, id, null]),
        ...(body.return_routed_experts
          ? { routed_experts: Buffer.from(experts.buffer).toString('base64') }
          : {}),
      },
    });
  });
  return new Promise((resolve) => engine.listen(0, '127.0.0.1', resolve));
}

function startWorker(record: string): Promise<string> {
  worker = spawn(
    '/usr/bin/python3',
    [
      '-m',
      'tests.serve_stand_ins',
      record,
      'use_rollout_routing_replay=true',
      `num_layers=${LAYERS}`,
      `moe_router_topk=${TOPK}`,
      'global_batch_size=2',
    ],
    { cwd: workerDirectory, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  let errors = '';
  worker.stderr?.on('data', (data: Buffer) => {
    errors = (errors + data.toString()).slice(-4000);
  });
  return new Promise((resolve, reject) => {
    let output = '';
    worker.stdout?.on('data', (data: Buffer) => {
      output += data.toString();
      const match = /listening on ([\d.]+:\d+)/.exec(output);
      if (match) resolve(match[1]!);
    });
    worker.once('exit', (code) => reject(new Error(`the worker exited with ${code}:\n${errors}`)));
  });
}

class AskCapital extends WhiteboxAgent {
  async run(_sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
    await context.chat({ messages: [{ role: 'user', content: 'The capital of France?' }], max_tokens: 8 });
    return 'Paris';
  }
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'dressage-r3-'));
  await startEngine();
  proxy = await startProxyServer(
    createProxyConfig({
      tokenizerPath: defaultTokenizerPath(),
      tokenBuildModel: 'qwen3',
      sglangRouterUrl: `http://127.0.0.1:${(engine.address() as AddressInfo).port}`,
      host: '127.0.0.1',
      port: 0,
      useRolloutRoutingReplay: true,
      routedExpertsDtype: 'uint16',
    }),
  );
  trainer = createTrainerClient(await startWorker(join(scratch, 'received.json')));
}, 120_000);

afterAll(async () => {
  trainer?.close();
  worker?.stdin?.end();
  if (worker && worker.exitCode === null) await new Promise((resolve) => worker.once('exit', resolve));
  await proxy?.close();
  engine?.closeAllConnections();
  await new Promise((resolve) => engine?.close(resolve));
  await rm(scratch, { recursive: true, force: true });
});

describe('training.routing_replay', () => {
  const base = `name: r3
output_dir: out
data: { path: prompts.jsonl }
trainer: { kind: grpc, address: "127.0.0.1:1" }
`;
  it('is off unless set, and needs an SGLang engine', () => {
    const off = parseRecipe(
      `${base}engine: { kind: sglang, router_url: "http://127.0.0.1:1" }\ntraining: { steps: 1 }\n`,
      'r',
      {},
    );
    expect(routingReplayOf(off)).toBeNull();
    expect(conversionOptionsOf(off, 2, null).useRolloutRoutingReplay).toBeUndefined();
    expect(() =>
      parseRecipe(
        `${base}engine: { kind: embedded }\ntraining: { steps: 1, routing_replay: { num_layers: 2, moe_router_topk: 1 } }\n`,
        'r',
        {},
      ),
    ).toThrow(/training\.routing_replay.*engine\.kind sglang/s);
  });
});

describe('routing replay (R3) from the proxy to slime', () => {
  it("reaches the actor's rollout_routed_experts: len(tokens) - 1 rows of layers × top-k per sample", async () => {
    const recipe = parseRecipe(
      `name: r3
output_dir: out
data: { path: prompts.jsonl }
engine: { kind: sglang, router_url: "http://127.0.0.1:1" }
trainer: { kind: grpc, address: "127.0.0.1:1" }
training: { steps: 1, routing_replay: { num_layers: ${LAYERS}, moe_router_topk: ${TOPK} } }
`,
      'r3',
      {},
    );
    const proxyClient = new ProxyClient({ baseUrl: proxy.url });
    const generate = makeGenerate(AskCapital, {
      proxy: proxyClient,
      proxyUrl: proxy.url,
      routingReplay: routingReplayOf(recipe),
    });
    const samples: Sample[] = [];
    for (let index = 0; index < 4; index++) {
      const produced = await generate(
        createSample({ index, group_index: index >> 1, prompt: 'q', reward: index % 2 }),
      );
      samples.push(...produced);
    }
    expect(samples.every((sample) => sample.rollout_routed_experts !== null)).toBe(true);
    const packed = convertSamplesToPackedTrainBatch(samples, conversionOptionsOf(recipe, 2, null));
    // Packed in the width the proxy recorded them in.
    expect(packed.routed_experts).toMatchObject({ dtype: 'uint16', num_layers: LAYERS, topk: TOPK });
    await trainer.train(packed, { rollout_id: 1, global_batch_size: 2 });

    const received = JSON.parse(await readFile(join(scratch, 'received.json'), 'utf8')) as Array<{
      tokens: number[][];
      rollout_routed_experts: Array<{ shape: number[]; dtype: string; ids: number[] }> | null;
    }>;
    let checked = 0;
    for (const rank of received) {
      expect(rank.rollout_routed_experts).not.toBeNull();
      rank.tokens.forEach((tokens, index) => {
        const routed = rank.rollout_routed_experts![index]!;
        expect(routed.shape).toEqual([tokens.length - 1, LAYERS, TOPK]);
        expect(routed.dtype).toBe('torch.int32');
        const expected: number[] = [];
        for (let row = 0; row < tokens.length - 1; row++)
          for (let layer = 0; layer < LAYERS; layer++)
            for (let slot = 0; slot < TOPK; slot++) expected.push(expert(tokens[row]!, layer, slot));
        expect(routed.ids).toEqual(expected);
        checked += 1;
      });
    }
    // Every sample reached a data-parallel rank's actor.
    expect(checked).toBeGreaterThanOrEqual(samples.length);
  });
});
