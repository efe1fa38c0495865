// The cluster dry run against real services on loopback: the embedded engine stands in for an SGLang
// router (it serves `/workers`), the embedded trainer for the Megatron worker (same TrainerService).
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  buildVocabulary,
  CausalLanguageModel,
  InferenceEngine,
  initializeBackend,
  startEmbeddedTrainerServer,
  startEngineServer,
} from '@dressage/embedded';
import { createProxyConfig, startProxyServer } from '@dressage/proxy';
import { loadTokenizer } from '@dressage/tito';
import { describe, expect, it } from 'vitest';
import { dryRun, formatChecks } from './dry-run.js';
import { defaultTokenizerPath } from './embedded-stack.js';
import { loadRecipe } from './recipe.js';

describe('dressage train --dry-run', () => {
  it('passes against live services and names the one that is down', async () => {
    await initializeBackend({ backend: 'auto' });
    const tokenizerPath = defaultTokenizerPath();
    const tokenizer = await loadTokenizer(tokenizerPath);
    const model = CausalLanguageModel.create(buildVocabulary({ tokenizer, texts: ['What is 1 + 2?'] }), {
      layerCount: 1,
      modelDimension: 16,
      headCount: 2,
      contextLength: 64,
    });
    const engine = new InferenceEngine({ model, weightVersion: '5' });
    const engineServer = await startEngineServer({ engine, tokenizer });
    const trainerServer = await startEmbeddedTrainerServer({ model, engine, weightVersion: '5' });
    const proxy = await startProxyServer(
      createProxyConfig({
        tokenizerPath,
        tokenBuildModel: 'qwen3',
        sglangRouterUrl: engineServer.url,
        host: '127.0.0.1',
        port: 0,
      }),
    );
    const directory = await mkdtemp(join(tmpdir(), 'dressage-dry-run-'));
    await writeFile(
      join(directory, 'prompts.jsonl'),
      '{"prompt": "What is 1 + 2?", "label": "3"}\n{"prompt": "What is 2 + 2?", "label": "4"}\n',
    );
    const recipePath = join(directory, 'recipe.yaml');
    await writeFile(
      recipePath,
      `name: dry
output_dir: ${join(directory, 'run')}
tokenizer_path: ${tokenizerPath}
data: { path: prompts.jsonl }
proxy: { url: "${proxy.url}", context_window: 64, token_build_model: qwen3 }
engine: { kind: sglang, router_url: "${engineServer.url}" }
trainer: { kind: grpc, address: "${trainerServer.address}" }
training: { steps: 1 }
`,
    );
    try {
      const loaded = await loadRecipe(recipePath);
      const checks = await dryRun(loaded, { timeoutMs: 5_000 });
      expect(checks.map((item) => item.name)).toEqual([
        'data: prompt file',
        'tokenizer',
        'proxy: health',
        'proxy: integration capabilities',
        'engine: router workers',
        'engine: consistent weight versions',
        'trainer: GetInfo',
        'trainer: health',
      ]);
      expect(
        checks.filter((item) => !item.ok),
        formatChecks(checks),
      ).toEqual([]);
      expect(checks.find((item) => item.name === 'data: prompt file')?.detail).toBe(
        '2 prompts, every line valid',
      );
      expect(checks.find((item) => item.name === 'engine: consistent weight versions')?.detail).toBe('all 5');
      expect(checks.find((item) => item.name === 'tokenizer')?.detail).toBe(
        `${tokenizerPath}: qwen3 renders the chat template of the model directory ${tokenizerPath}`,
      );

      // Routing replay needs a proxy that records routed experts; this one does not.
      const replayPath = join(directory, 'replay.yaml');
      await writeFile(
        replayPath,
        (await readFile(recipePath, 'utf8')).replace(
          'training: { steps: 1 }',
          'training: { steps: 1, routing_replay: { num_layers: 2, moe_router_topk: 1 } }',
        ),
      );
      const replay = await dryRun(await loadRecipe(replayPath), { timeoutMs: 5_000 });
      expect(replay.find((item) => item.name === 'proxy: health')).toMatchObject({
        ok: false,
        detail: expect.stringContaining('without --use-rollout-routing-replay'),
      });

      await trainerServer.close();
      const afterStop = await dryRun(loaded, { timeoutMs: 2_000 });
      const failed = afterStop.filter((item) => !item.ok).map((item) => item.name);
      expect(failed).toContain('trainer: GetInfo');
      expect(afterStop.find((item) => item.name === 'trainer: GetInfo')?.detail).toMatch(
        /unavailable|unreachable/,
      );
      expect(formatChecks(afterStop)).toMatch(/^FAIL {2}trainer: GetInfo/m);
    } finally {
      await proxy.close();
      await trainerServer.close().catch(() => undefined);
      await engineServer.close();
      engine.close();
      model.dispose();
    }
  }, 120_000);

  it("runs the Megatron worker's slime checks and names the flag slime would reject", async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-dry-run-slime-'));
    const workerDirectory = join(dirname(fileURLToPath(import.meta.url)), '../../../megatron-worker');
    const args = [
      ...['--actor-num-gpus-per-node', '8', '--rollout-num-gpus', '8', '--hf-checkpoint', '/models/m'],
      ...['--num-layers', '2', '--hidden-size', '8', '--num-attention-heads', '2', '--num-rollout', '3'],
      ...['--sglang-router-ip', '127.0.0.1', '--sglang-router-port', '9'],
      '--no-check-for-nan-in-loss-and-grad',
    ];
    const recipePath = join(directory, 'recipe.yaml');
    await writeFile(
      recipePath,
      `name: dry
output_dir: ${join(directory, 'run')}
data: { path: prompts.jsonl }
engine: { kind: sglang, router_url: "http://127.0.0.1:9" }
trainer:
  kind: grpc
  address: 127.0.0.1:9
  slime_check: { python: /usr/bin/python3, worker_dir: ${workerDirectory}, args: "${args.join(' ')}" }
training: { steps: 1 }
`,
    );
    const checks = await dryRun(await loadRecipe(recipePath), { timeoutMs: 5_000 });
    const slime = Object.fromEntries(
      checks
        .filter((item) => item.name.startsWith('slime:') || item.name.startsWith('engine: owned'))
        .map((item) => [item.name, item]),
    );
    expect(Object.keys(slime)).toEqual([
      'slime: importable',
      'slime: arguments',
      'slime: GPUs',
      'engine: owned by slime',
    ]);
    // No --load or --ref-load: slime's post-processing leaves the actors no model to load.
    expect(slime['slime: arguments']).toMatchObject({
      ok: false,
      detail: expect.stringMatching(
        /^missing --rollout-batch-size; slime would load no model: .* pass --ref-load/,
      ),
    });
    expect(slime['slime: GPUs']?.detail).toContain('16 GPUs (8 for Megatron, 8 for');
    expect(slime['engine: owned by slime']?.detail).toMatch(/router http:\/\/127.0.0.1:9 unreachable/);
  }, 60_000);
});
