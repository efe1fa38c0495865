import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DressageError, type PackedTrainBatch } from '@dressage/protocol';
import { createTrainerClient, policyLossReference, type TrainerClient } from '@dressage/trainer-bridge';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type EmbeddedFixture,
  postJson,
  smallConfig,
  startFixture,
} from '../__fixtures__/embedded-fixture.js';
import { calculatorAnswers, packSequences, type TrainSequence } from '../__fixtures__/train-batch.js';
import { loadModel, saveCheckpoint, weightsEqual } from '../checkpoint.js';
import { CausalLanguageModel } from '../model.js';
import { EmbeddedTrainer, nextWeightVersion } from './embedded-trainer.js';
import { type EmbeddedTrainerServer, startEmbeddedTrainerServer } from './trainer-server.js';
import { optimizerStateFile, trainerStateFile } from './trainer-state.js';

let fixture: EmbeddedFixture;
let scratch: string;
let prompt: number[];
let sequences: TrainSequence[];

beforeAll(async () => {
  fixture = await startFixture();
  scratch = await mkdtemp(join(tmpdir(), 'embedded-trainer-'));
  ({ prompt, sequences } = calculatorAnswers(fixture.tokenizer, [1, -0.5, -0.5, -0.5]));
});

afterAll(async () => {
  await fixture.close();
  await rm(scratch, { recursive: true, force: true });
});

function trainerFor(
  options: Partial<ConstructorParameters<typeof EmbeddedTrainer>[0]> = {},
): EmbeddedTrainer {
  return new EmbeddedTrainer({ model: fixture.model, learningRate: 3e-3, ...options });
}

function sequenceLogprob(model: CausalLanguageModel, sequence: TrainSequence): number {
  const [logprobs] = model.sequenceLogprobs([sequence.tokens]);
  return Array.from(logprobs!.slice(sequence.tokens.length - sequence.responseLength - 1)).reduce(
    (sum, value) => sum + value,
    0,
  );
}

describe('nextWeightVersion', () => {
  it('increments a trailing number and starts others at 1', () => {
    expect(nextWeightVersion('v1')).toBe('v2');
    expect(nextWeightVersion('41')).toBe('42');
    expect(nextWeightVersion('step-009')).toBe('step-10');
    expect(nextWeightVersion('default')).toBe('1');
  });
});

describe('EmbeddedTrainer over gRPC', () => {
  let served: EmbeddedTrainerServer;
  let client: TrainerClient;

  beforeAll(async () => {
    served = await startEmbeddedTrainerServer({
      model: fixture.model,
      engine: fixture.engine,
      learningRate: 1e-3,
    });
    client = createTrainerClient(served.address);
  });

  afterAll(async () => {
    client.close();
    await served.close();
  });

  it('describes itself', async () => {
    const info = await client.getInfo();
    expect(info).toMatchObject({
      trainer_kind: 'embedded',
      weight_version: 'v1',
      max_tokens_per_sample: (smallConfig.contextLength ?? 0) + 1,
      train_steps: 0,
    });
    expect(['wasm', 'cpu']).toContain(info.backend);
    expect((await client.health()).status).toBe(1);
  });

  it('recomputes on-policy logprobs exactly, lowers the clipped loss and keeps tensors flat', async () => {
    const batch = packSequences(fixture.model, sequences);
    const losses: number[] = [];
    const tensorCounts: number[] = [];
    const before = sequenceLogprob(served.trainer.model, sequences[0]!);
    for (let step = 0; step < 5; step++) {
      const response = await client.train(batch, { loss: { use_rollout_logprobs: true } });
      expect(response.optimizer_steps).toBe(1);
      expect(response.tokens_trained).toBe(batch.loss_masks.length);
      losses.push(response.metrics.loss!);
      tensorCounts.push(tf.memory().numTensors);
      if (step === 0) {
        // The first step sees the weights that produced the rollout logprobs.
        expect(response.metrics.train_rollout_logprob_abs_diff_max).toBeLessThanOrEqual(1e-4);
        expect(response.metrics.train_rollout_logprob_abs_diff).toBeLessThanOrEqual(1e-4);
        expect(response.metrics.pg_clipfrac).toBe(0);
      } else {
        expect(response.metrics.train_rollout_logprob_abs_diff_max).toBeGreaterThan(1e-4);
      }
      for (const name of ['pg_loss', 'ppo_kl', 'grad_norm', 'tokens', 'learning_rate']) {
        expect(Number.isFinite(response.metrics[name])).toBe(true);
      }
    }
    for (let step = 1; step < losses.length; step++) expect(losses[step]).toBeLessThan(losses[step - 1]!);
    // Adam's moments appear at the first step; nothing accumulates after it.
    expect(new Set(tensorCounts.slice(1)).size).toBe(1);
    expect(sequenceLogprob(served.trainer.model, sequences[0]!)).toBeGreaterThan(before);
    expect((await client.getInfo()).train_steps).toBe(5);
  });

  it('refuses a batch that carries routed experts, naming the field', async () => {
    const batch = packSequences(null, [{ tokens: prompt.slice(0, 6), responseLength: 2 }]);
    const routed: PackedTrainBatch = {
      ...batch,
      routed_experts: { dtype: 'uint8', num_layers: 2, topk: 1, ids: new Uint8Array(5 * 2) },
    };
    const steps = (await client.getInfo()).train_steps;
    await expect(client.train(routed)).rejects.toMatchObject({
      code: 'invalid_argument',
      message: expect.stringContaining('routed experts (routing replay, R3)'),
    });
    expect((await client.getInfo()).train_steps).toBe(steps);
  });

  it('rejects a sample longer than the context with invalid_argument', async () => {
    const long = Array.from(
      { length: (smallConfig.contextLength ?? 0) + 2 },
      (_, index) => prompt[index % prompt.length]!,
    );
    const batch = packSequences(null, [{ tokens: long, responseLength: 4 }]);
    await expect(client.train(batch)).rejects.toMatchObject({
      code: 'invalid_argument',
      message: expect.stringContaining('context length'),
    });
    await expect(client.train(batch, { loss: { loss_type: 'dpo' } })).rejects.toMatchObject({
      code: 'invalid_argument',
    });
  });

  it('publishes weights to the in-process engine: new version, new outputs', async () => {
    const generate = () =>
      postJson(`${fixture.server.url}/generate`, {
        input_ids: prompt,
        sampling_params: { temperature: 0, max_new_tokens: 6, ignore_eos: true },
        return_logprob: true,
      });
    const before = await generate();
    expect(before.body.meta_info.weight_version).toBe('v1');
    const update = await client.updateWeights();
    expect(update).toMatchObject({ weight_version: 'v2', engines_updated: 1, model_path: '' });
    expect(fixture.engine.weightVersion).toBe('v2');
    expect(weightsEqual(fixture.engine.model.getWeights(), served.trainer.model.getWeights())).toBe(true);
    const after = await generate();
    expect(after.body.meta_info.weight_version).toBe('v2');
    expect(after.body.meta_info.output_token_logprobs).not.toEqual(
      before.body.meta_info.output_token_logprobs,
    );
    expect((await client.getInfo()).weight_version).toBe('v2');
  });
});

describe('EmbeddedTrainer over gRPC: nothing non-finite reaches the weights', () => {
  let served: EmbeddedTrainerServer;
  let client: TrainerClient;

  beforeAll(async () => {
    served = await startEmbeddedTrainerServer({ model: fixture.model, learningRate: 1e-3 });
    client = createTrainerClient(served.address);
  });

  afterAll(async () => {
    client.close();
    await served.close();
  });

  const poisoned: Array<[string, (batch: PackedTrainBatch) => void, Record<string, unknown>, string]> = [
    [
      'a NaN reward',
      (batch) => {
        batch.rewards[2] = Number.NaN;
      },
      {},
      'sample 2 (rollout_id 2) has rewards = NaN',
    ],
    [
      'an infinite reward',
      (batch) => {
        batch.rewards[0] = -Infinity;
      },
      {},
      'sample 0 (rollout_id 0) has rewards',
    ],
    [
      'NaN rollout logprobs with use_rollout_logprobs',
      (batch) => void batch.rollout_log_probs!.fill(Number.NaN),
      { use_rollout_logprobs: true },
      'sample 0 (rollout_id 0) has rollout_log_probs[0]',
    ],
    ['a learning rate of 1e30', () => undefined, { learning_rate: 1e30 }, 'loss.learning_rate'],
    ['a negative eps_clip', () => undefined, { eps_clip: -1 }, 'loss.eps_clip'],
    ['a negative eps_clip_high', () => undefined, { eps_clip_high: -5 }, 'loss.eps_clip_high'],
  ];

  it.each(poisoned)(
    'rejects %s with INVALID_ARGUMENT and leaves the weights alone',
    async (_, poison, loss, named) => {
      const before = served.trainer.model.getWeights();
      const batch = packSequences(fixture.model, sequences);
      poison(batch);
      await expect(client.train(batch, { loss })).rejects.toMatchObject({
        code: 'invalid_argument',
        message: expect.stringContaining(named),
      });
      expect(weightsEqual(served.trainer.model.getWeights(), before)).toBe(true);
    },
  );

  it('skips and reports a step whose gradient norm is not finite', async () => {
    const before = served.trainer.model.getWeights();
    // Finite inputs whose gradients overflow float32: the norm is infinite.
    const batch = packSequences(
      fixture.model,
      sequences.map((sequence) => ({ ...sequence, reward: 3e38 })),
    );
    const response = await client.train(batch, { loss: { eps_clip: 1e30 } });
    expect(response.optimizer_steps).toBe(0);
    expect(response.metrics.nonfinite_step_skipped).toBe(1);
    expect(Number.isFinite(response.metrics.grad_norm)).toBe(false);
    expect(weightsEqual(served.trainer.model.getWeights(), before)).toBe(true);
    // The trainer keeps training on good data afterwards.
    const good = await client.train(packSequences(fixture.model, sequences));
    expect(good.optimizer_steps).toBe(1);
  });

  it('refuses to save or publish non-finite weights', async () => {
    const weights = served.trainer.model.getWeights();
    const [name, values] = [...weights][0]!;
    const good = values.slice();
    values[3] = Number.NaN;
    served.trainer.model.setWeights(weights);
    try {
      await expect(client.saveCheckpoint({ path: join(scratch, 'nan-checkpoint') })).rejects.toMatchObject({
        code: 'failed_precondition',
        message: expect.stringContaining(`parameter ${name}[3] is NaN`),
      });
      await expect(client.updateWeights()).rejects.toMatchObject({ code: 'failed_precondition' });
    } finally {
      weights.set(name, good);
      served.trainer.model.setWeights(weights);
    }
  });
});

describe('EmbeddedTrainer: LoadCheckpoint of a diverged run', () => {
  it('refuses a checkpoint with a non-finite weight or Adam moment and applies nothing of it', async () => {
    const trainer = trainerFor();
    const other = trainerFor();
    try {
      await trainer.train({ rollout_id: 1 }, packSequences(fixture.model, sequences));
      const before = other.model.getWeights();
      // Weights written by the model's own writer (the trainer refuses to save NaN).
      const weights = trainer.model.getWeights();
      const [name, values] = [...weights][1]!;
      const good = values.slice();
      values[2] = Number.POSITIVE_INFINITY;
      trainer.model.setWeights(weights);
      const diverged = join(scratch, 'diverged-weights');
      await saveCheckpoint(diverged, trainer.model);
      await expect(other.loadCheckpoint({ path: diverged })).rejects.toMatchObject({
        code: 'failed_precondition',
        message: expect.stringContaining(
          `the checkpoint in ${diverged} holds a non-finite number: parameter ${name}[2] is Infinity`,
        ),
      });
      expect(weightsEqual(other.model.getWeights(), before)).toBe(true);
      // A trainer checkpoint whose Adam moments went NaN (its hash rewritten to match).
      weights.set(name, good);
      trainer.model.setWeights(weights);
      const moments = join(scratch, 'diverged-moments');
      await trainer.saveCheckpoint({ path: moments });
      const bytes = await readFile(join(moments, optimizerStateFile));
      new DataView(bytes.buffer, bytes.byteOffset).setFloat32(8, Number.NaN, true);
      await writeFile(join(moments, optimizerStateFile), bytes);
      const state = JSON.parse(await readFile(join(moments, trainerStateFile), 'utf8'));
      state.optimizer.sha256 = createHash('sha256').update(bytes).digest('hex');
      await writeFile(join(moments, trainerStateFile), JSON.stringify(state));
      await expect(other.loadCheckpoint({ path: moments })).rejects.toMatchObject({
        code: 'failed_precondition',
        message: expect.stringContaining('Adam moments[2] is NaN'),
      });
      expect(weightsEqual(other.model.getWeights(), before)).toBe(true);
      // The same directory with its moments intact loads.
      await trainer.saveCheckpoint({ path: moments });
      await expect(other.loadCheckpoint({ path: moments })).resolves.toMatchObject({ rollout_id: 1 });
    } finally {
      await trainer.dispose();
      await other.dispose();
    }
  });
});

describe('EmbeddedTrainer', () => {
  it('trains the same step whatever the micro-batch size', async () => {
    const batch = packSequences(fixture.model, [
      ...sequences,
      ...sequences.map((s) => ({ ...s, reward: 0.25 })),
    ]);
    const whole = trainerFor();
    const split = trainerFor({ maxMicroBatchTokens: 1 });
    try {
      const one = await whole.train({}, batch);
      const many = await split.train({}, batch);
      expect(one.metrics!.micro_batches).toBe(1);
      expect(many.metrics!.micro_batches).toBe(batch.sample_count);
      for (const name of ['loss', 'pg_loss', 'grad_norm', 'train_rollout_logprob_abs_diff_max']) {
        expect(many.metrics![name]).toBeCloseTo(one.metrics![name]!, 5);
      }
    } finally {
      await whole.dispose();
      await split.dispose();
    }
  });

  it('matches the float64 reference loss with exact denominators below 1, across micro-batches', async () => {
    const trainer = trainerFor({ maxMicroBatchTokens: 2 * prompt.length });
    try {
      const batch = packSequences(
        fixture.model,
        sequences.map((sequence, index) => ({
          ...sequence,
          lossMask: Array.from({ length: sequence.responseLength }, (_, token) =>
            (token + index) % 3 === 0 ? 0 : 1,
          ),
        })),
      );
      // Off-policy rollout logprobs, so ratios leave 1 and some get clipped.
      const rollout = batch.rollout_log_probs!;
      for (let index = 0; index < rollout.length; index++)
        rollout[index] = rollout[index]! + (index % 2 ? 0.4 : -0.3);
      // Prompt-equal denominators can fall below 1: slime's max(d, 1) would change the weights.
      batch.rollout_mask_sums.set([0.5, 0.25, 3, 0.75]);
      const current = trainer.model.sequenceLogprobs(sequences.map((sequence) => sequence.tokens));
      const logProbs = sequences.flatMap((sequence, row) =>
        Array.from(current[row]!.slice(sequence.tokens.length - sequence.responseLength - 1)),
      );
      const options = { useRolloutLogProbs: true, globalBatchSize: 3 };
      const reference = policyLossReference({ logProbs }, batch, options);
      const response = await trainer.train(
        { global_batch_size: 3, loss: { use_rollout_logprobs: true } },
        batch,
      );
      expect(response.metrics!.micro_batches).toBeGreaterThan(1);
      expect(reference.metrics.pg_clipfrac).toBeGreaterThan(0);
      expect(response.metrics!.loss).toBeCloseTo(reference.loss, 5);
      for (const name of ['pg_loss', 'pg_clipfrac', 'ppo_kl'] as const) {
        expect(response.metrics![name]).toBeCloseTo(reference.metrics[name]!, 5);
      }
    } finally {
      await trainer.dispose();
    }
  });

  it('trains the supervised loss (loss_type sft_loss): the mean NLL of trainable tokens goes down', async () => {
    const target = sequences[1]!;
    const batch = packSequences(fixture.model, [target]);
    const trainer = trainerFor({ learningRate: 1e-2 });
    try {
      const expected = -sequenceLogprob(fixture.model, target) / target.responseLength;
      const losses: number[] = [];
      for (let step = 0; step < 4; step++) {
        const response = await trainer.train({ loss: { loss_type: 'sft_loss' } }, batch);
        losses.push(response.metrics!.loss!);
      }
      expect(losses[0]).toBeCloseTo(expected, 4);
      for (let step = 1; step < losses.length; step++) expect(losses[step]).toBeLessThan(losses[step - 1]!);
    } finally {
      await trainer.dispose();
    }
  });

  it('stops on a cancelled signal without updating the weights', async () => {
    const trainer = trainerFor({ maxMicroBatchTokens: 1 });
    try {
      const before = trainer.model.getWeights();
      const controller = new AbortController();
      controller.abort(new DressageError({ code: 'cancelled', message: 'the client cancelled the call' }));
      await expect(
        trainer.train({}, packSequences(fixture.model, sequences), controller.signal),
      ).rejects.toMatchObject({
        code: 'cancelled',
      });
      expect(weightsEqual(before, trainer.model.getWeights())).toBe(true);
      expect(trainer.health().status).toBe(1);
    } finally {
      await trainer.dispose();
    }
  });

  it('does no optimizer step on a batch without trainable tokens', async () => {
    const trainer = trainerFor();
    try {
      const batch = packSequences(fixture.model, [
        { ...sequences[0]!, lossMask: new Array(sequences[0]!.responseLength).fill(0) },
      ]);
      const before = trainer.model.getWeights();
      const response = await trainer.train({}, batch);
      expect(response.optimizer_steps).toBe(0);
      expect(weightsEqual(before, trainer.model.getWeights())).toBe(true);
    } finally {
      await trainer.dispose();
    }
  });

  it('clips a gradient spike at clip_grad_spike × the median norm, keeping the history in checkpoints', async () => {
    // Policy-gradient steps are linear in the advantages: rewards × s give gradients × s. Five
    // steps of small advantages set the history; then one of full size is a spike.
    const scaled = (factor: number) =>
      packSequences(
        fixture.model,
        sequences.map((sequence) => ({ ...sequence, reward: (sequence.reward ?? 0) * factor })),
      );
    const small = scaled(0.01);
    const loss = { clip_grad_spike: 3 };
    const clipped = trainerFor();
    // Trains the same history without the spike clip, then the spike scaled by hand.
    const unclipped = trainerFor();
    const resumed = trainerFor();
    try {
      const norms: number[] = [];
      for (let step = 0; step < 5; step++) {
        const response = await clipped.train({ loss }, small);
        // No limit before five norms are recorded.
        expect(response.metrics!.grad_spike_limit).toBeUndefined();
        norms.push(response.metrics!.grad_norm!);
        await unclipped.train({}, small);
      }
      const directory = join(scratch, 'spike-checkpoint');
      await clipped.saveCheckpoint({ path: directory });
      const state = JSON.parse(await readFile(join(directory, trainerStateFile), 'utf8'));
      expect(state.gradient_norms).toEqual(norms);
      await resumed.loadCheckpoint({ path: directory });

      const before = clipped.model.getWeights();
      const spike = await clipped.train({ loss }, scaled(1));
      const median = [...norms].sort((a, b) => a - b)[2]!;
      expect(spike.metrics!.grad_spike_limit).toBeCloseTo(3 * median, 6);
      expect(spike.metrics!.grad_spike_clipped).toBe(1);
      expect(spike.metrics!.grad_norm!).toBeGreaterThan(10 * median);
      // Clipped means scaled down to the limit: the same step as advantages scaled by limit / norm.
      await unclipped.train({}, scaled(spike.metrics!.grad_spike_limit! / spike.metrics!.grad_norm!));
      const ours = clipped.model.getWeights();
      let largest = 0;
      for (const [name, values] of unclipped.model.getWeights()) {
        const other = ours.get(name)!;
        for (let index = 0; index < values.length; index++)
          largest = Math.max(largest, Math.abs(values[index]! - other[index]!));
      }
      expect(largest).toBeLessThan(1e-6);
      expect(weightsEqual(before, ours)).toBe(false);
      // The resumed trainer read the same history: the same limit, bit for bit the same step.
      const again = await resumed.train({ loss }, scaled(1));
      expect(again.metrics!.grad_spike_limit).toBe(spike.metrics!.grad_spike_limit);
      expect(weightsEqual(resumed.model.getWeights(), clipped.model.getWeights())).toBe(true);
      // A supervised step neither reads nor records the history.
      const sft = await clipped.train({ loss: { loss_type: 'sft_loss', clip_grad_spike: 3 } }, small);
      expect(sft.metrics!.grad_spike_limit).toBeUndefined();
      await expect(clipped.train({ loss: { clip_grad_spike: 1 } }, small)).rejects.toThrow(
        /loss\.clip_grad_spike/,
      );
    } finally {
      await clipped.dispose();
      await unclipped.dispose();
      await resumed.dispose();
    }
  });

  it('round-trips checkpoints bit-exactly, optimizer state included', async () => {
    const batch: PackedTrainBatch = packSequences(fixture.model, sequences);
    const first = trainerFor({ weightVersion: 'w5' });
    const second = trainerFor();
    try {
      await first.train({ rollout_id: 3 }, batch);
      await first.train({ rollout_id: 4 }, batch);
      const directory = join(scratch, 'checkpoint');
      const saved = await first.saveCheckpoint({ path: directory });
      expect(saved).toMatchObject({ path: directory, rollout_id: 4, weight_version: 'w5' });
      expect(saved.size_bytes).toBeGreaterThan(first.model.parameterCount * 4);
      const snapshot = first.model.getWeights();
      await first.train({}, batch);

      const loaded = await second.loadCheckpoint({ path: directory });
      expect(loaded).toMatchObject({ rollout_id: 4, weight_version: 'w5' });
      expect(second.trainSteps).toBe(2);
      expect(weightsEqual(second.model.getWeights(), snapshot)).toBe(true);
      // The checkpoint is a plain model directory too.
      const { model, weightVersion } = await loadModel(directory);
      expect(weightVersion).toBe('w5');
      expect(weightsEqual(model.getWeights(), snapshot)).toBe(true);
      model.dispose();
      // Same moments, same step: the next update is bit-identical.
      await second.train({}, batch);
      expect(weightsEqual(second.model.getWeights(), first.model.getWeights())).toBe(true);
    } finally {
      await first.dispose();
      await second.dispose();
    }
  });

  it('publishes to engine URLs through a checkpoint and /update_weights_from_disk', async () => {
    const trainer = trainerFor({
      engineUrls: [fixture.server.url],
      weightsDirectory: join(scratch, 'weights'),
    });
    try {
      await trainer.train({ loss: { loss_type: 'sft_loss' } }, packSequences(null, [sequences[2]!]));
      const update = await trainer.updateWeights({ weight_version: 'disk-1' });
      expect(update.engines_updated).toBe(1);
      expect(update.model_path).toContain(join(scratch, 'weights'));
      expect(fixture.engine.weightVersion).toBe('disk-1');
      expect(weightsEqual(fixture.engine.model.getWeights(), trainer.model.getWeights())).toBe(true);
      await expect(trainer.updateWeights({ engine_urls: ['http://127.0.0.1:9'] })).rejects.toBeInstanceOf(
        DressageError,
      );
    } finally {
      await trainer.dispose();
    }
  });

  it('never changes the model it was created from', async () => {
    const source = CausalLanguageModel.create(fixture.vocabulary, smallConfig);
    const before = source.getWeights();
    const trainer = new EmbeddedTrainer({ model: source });
    try {
      await trainer.train({}, packSequences(source, sequences));
      expect(weightsEqual(before, source.getWeights())).toBe(true);
      expect(weightsEqual(before, trainer.model.getWeights())).toBe(false);
    } finally {
      await trainer.dispose();
      source.dispose();
    }
  });
});
