import { readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CausalLanguageModel,
  EmbeddedTrainer,
  type EngineServer,
  InferenceEngine,
  initializeBackend,
  loadModel,
  saveCheckpoint,
  startEngineServer,
  TokenVocabulary,
} from '@dressage/embedded';
import { weightsEqual } from '@dressage/embedded/internal';
import type { PackedTrainBatch } from '@dressage/protocol';
import { createTrainerClient, type TrainerClient } from '@dressage/trainer-bridge';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorker, type WorkerProcess } from './worker-process.js';

// The TypeScript engine samples, the PyTorch trainer trains on what it sampled and publishes back:
// the engine's float32 logprobs and the trainer's recomputation agree on the engine's own tokens.
const vocabulary = new TokenVocabulary(Array.from({ length: 40 }, (_, index) => 100 + 3 * index));
const config = {
  modelDimension: 32,
  layerCount: 2,
  headCount: 4,
  feedForwardDimension: 64,
  contextLength: 48,
  seed: 5,
  positionEncoding: 'rotary' as const,
  initialization: 'fan_in' as const,
};
const samples = 8;

interface GenerateBody {
  output_ids: number[];
  meta_info: { output_token_logprobs: [number, number, string | null][] };
}

let scratch: string;
let model: CausalLanguageModel;
let engine: InferenceEngine;
let server: EngineServer;
let worker: WorkerProcess;
let client: TrainerClient;

async function rollout(seed: number): Promise<PackedTrainBatch> {
  const tokens: number[] = [];
  const totals: number[] = [];
  const responses: number[] = [];
  const logProbs: number[] = [];
  for (let sample = 0; sample < samples; sample++) {
    const prompt = Array.from(
      { length: 5 },
      (_, index) => vocabulary.tokenIds[(seed * 7 + sample * 5 + index * 3) % 40]!,
    );
    const response = await fetch(`${server.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        input_ids: prompt,
        return_logprob: true,
        sampling_params: { max_new_tokens: 10, temperature: 1, seed: seed * 100 + sample },
      }),
    });
    const body = (await response.json()) as GenerateBody;
    tokens.push(...prompt, ...body.output_ids);
    totals.push(prompt.length + body.output_ids.length);
    responses.push(body.output_ids.length);
    logProbs.push(...body.meta_info.output_token_logprobs.map((entry) => entry[0]));
  }
  const responseTokens = responses.reduce((sum, length) => sum + length, 0);
  return {
    sample_count: samples,
    tokens: Int32Array.from(tokens),
    total_lengths: Int32Array.from(totals),
    response_lengths: Int32Array.from(responses),
    loss_masks: new Uint8Array(responseTokens).fill(1),
    rollout_log_probs: Float32Array.from(logProbs),
    teacher_log_probs: null,
    rollout_ids: Int32Array.from({ length: samples }, (_, index) => index),
    rewards: Float32Array.from({ length: samples }, (_, index) => (index % 2 === 0 ? 1 : -1)),
    raw_rewards: Float32Array.from({ length: samples }, (_, index) => index % 2),
    rollout_mask_sums: Float64Array.from(responses),
    truncated: new Uint8Array(samples),
    sample_indices: Int32Array.from({ length: samples }, (_, index) => index),
  };
}

describe('TS engine ↔ PyTorch trainer (--actor torch)', () => {
  beforeAll(async () => {
    await initializeBackend();
    scratch = await mkdtemp(join(tmpdir(), 'torch-actor-'));
    model = CausalLanguageModel.create(vocabulary, config);
    await saveCheckpoint(join(scratch, 'initial'), model, { weightVersion: '0' });
    engine = new InferenceEngine({ model, weightVersion: '0', seed: 1 });
    server = await startEngineServer({ engine });
    worker = await startWorker([
      '--actor',
      'torch',
      '--model',
      join(scratch, 'initial'),
      '--engine-url',
      server.url,
      '--weights-dir',
      join(scratch, 'published'),
      '--threads',
      '1',
    ]);
    client = createTrainerClient(worker.address);
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await worker?.stop();
    await server?.close();
    engine?.close();
    model?.dispose();
    await rm(scratch, { recursive: true, force: true });
  });

  it('recomputes the engine logprobs within 1e-4, publishes weights the engine loads, and again', async () => {
    expect(await client.getInfo()).toMatchObject({ trainer_kind: 'torch', weight_version: '0' });
    const first = await rollout(1);
    const trained = await client.train(first, {
      global_batch_size: samples,
      loss: { learning_rate: 0.02, use_tis: true },
    });
    expect(trained.optimizer_steps).toBe(1);
    expect(trained.tokens_trained).toBe(first.loss_masks.length);
    expect(trained.metrics.train_rollout_logprob_abs_diff_max).toBeLessThanOrEqual(1e-4);

    const update = await client.updateWeights({});
    expect(update).toMatchObject({ weight_version: '1', engines_updated: 1 });
    expect(engine.weightVersion).toBe('1');
    const [directory] = readdirSync(join(scratch, 'published'));
    const published = await loadModel(join(scratch, 'published', directory!));
    expect(published.weightVersion).toBe('1');
    published.model.dispose();

    // Fresh rollouts of the Python-trained weights, served by the TypeScript engine: parity again.
    const second = await rollout(2);
    const again = await client.train(second, { global_batch_size: samples, loss: { learning_rate: 0.02 } });
    expect(again.metrics.train_rollout_logprob_abs_diff_max).toBeLessThanOrEqual(1e-4);
    // The first rollout's tokens are now off-policy: the weights really moved.
    const stale = await client.train(first, { global_batch_size: samples, loss: { learning_rate: 1e-9 } });
    expect(stale.metrics.train_rollout_logprob_abs_diff_max).toBeGreaterThan(1e-3);
  }, 120_000);

  it("writes checkpoints the embedded trainer resumes, and resumes the embedded trainer's", async () => {
    const batch = await rollout(3);
    // The KL reference is frozen at this step (the weights the first test left) and moves with the
    // checkpoints in both directions.
    const options = {
      global_batch_size: samples,
      loss: { learning_rate: 0.01, use_kl_loss: true, kl_loss_coef: 0.1, kl_loss_type: 'low_var_kl' },
    };
    await client.train(batch, options);
    const fromPython = join(scratch, 'python-checkpoint');
    const saved = await client.saveCheckpoint({ path: fromPython, rollout_id: 7 });
    expect(saved.size_bytes).toBeGreaterThan(0);
    // Weights, version, counters, Adam's moments and the KL reference in the embedded trainer's own layout.
    const embedded = new EmbeddedTrainer({ model });
    try {
      expect(await embedded.loadCheckpoint({ path: fromPython })).toMatchObject({ rollout_id: 7 });
      const python = await loadModel(fromPython);
      expect(weightsEqual(embedded.model.getWeights(), python.model.getWeights())).toBe(true);
      python.model.dispose();
      // The same step from the same state on both sides: the same distance from the same reference.
      const ourStep = await embedded.train(options, batch);
      const theirStep = await client.train(batch, options);
      expect(ourStep.metrics!.kl_loss).toBeGreaterThan(1e-6);
      expect(Math.abs(ourStep.metrics!.kl_loss! - theirStep.metrics!.kl_loss!)).toBeLessThan(
        1e-3 * theirStep.metrics!.kl_loss!,
      );
      const fromTypeScript = join(scratch, 'typescript-checkpoint');
      await embedded.saveCheckpoint({ path: fromTypeScript, rollout_id: 8 });
      expect(await client.loadCheckpoint({ path: fromTypeScript })).toMatchObject({ rollout_id: 8 });
      // Both continue from the same state: one more identical step gives the same logprobs.
      const next = await rollout(4);
      const ourNext = await embedded.train(options, next);
      const theirNext = await client.train(next, options);
      expect(ourNext.metrics!.kl_loss).toBeGreaterThan(1e-6);
      expect(Math.abs(ourNext.metrics!.kl_loss! - theirNext.metrics!.kl_loss!)).toBeLessThan(
        1e-3 * theirNext.metrics!.kl_loss!,
      );
      await client.saveCheckpoint({ path: join(scratch, 'after'), rollout_id: 9 });
      const after = await loadModel(join(scratch, 'after'));
      const sequence = Array.from(next.tokens.subarray(0, next.total_lengths[0]!));
      const [ours] = embedded.model.sequenceLogprobs([sequence]);
      const [theirs] = after.model.sequenceLogprobs([sequence]);
      for (let index = 0; index < ours!.length; index++)
        expect(Math.abs(ours![index]! - theirs![index]!)).toBeLessThan(1e-4);
      after.model.dispose();
    } finally {
      await embedded.dispose();
    }
  }, 120_000);
});
