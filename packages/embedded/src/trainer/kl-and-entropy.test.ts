import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LossConfig, PackedTrainBatch } from '@dressage/protocol';
import { createTrainerClient, type KlLossType, policyLossReference } from '@dressage/trainer-bridge';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EmbeddedFixture, startFixture } from '../__fixtures__/embedded-fixture.js';
import { calculatorAnswers, packSequences, type TrainSequence } from '../__fixtures__/train-batch.js';
import { weightsEqual } from '../checkpoint.js';
import type { CausalLanguageModel } from '../model.js';
import { EmbeddedTrainer } from './embedded-trainer.js';
import { startEmbeddedTrainerServer } from './trainer-server.js';
import { referenceStateFile, trainerStateFile } from './trainer-state.js';

let fixture: EmbeddedFixture;
let scratch: string;
let prompt: number[];
let sequences: TrainSequence[];
let batch: PackedTrainBatch;

beforeAll(async () => {
  fixture = await startFixture();
  scratch = await mkdtemp(join(tmpdir(), 'embedded-kl-'));
  ({ prompt, sequences } = calculatorAnswers(fixture.tokenizer, [1, -0.5, 0.5, -1]));
  batch = packSequences(fixture.model, sequences);
});

afterAll(async () => {
  await fixture.close();
  await rm(scratch, { recursive: true, force: true });
});

function trainerFor(
  options: Partial<ConstructorParameters<typeof EmbeddedTrainer>[0]> = {},
): EmbeddedTrainer {
  return new EmbeddedTrainer({ model: fixture.model, learningRate: 1e-2, ...options });
}

/**
 * The policy's logprob and entropy of every response token (packed order), computed independently
 * of the trainer: one plain forward pass for the logits, then log-softmax at `temperature` in float64.
 */
function float64Policy(
  model: CausalLanguageModel,
  temperature = 1,
): { logProbs: number[]; entropy: number[] } {
  const prepared = model.prepareBatch(sequences.map((sequence) => sequence.tokens));
  const outputs = model.vocabulary.outputCount;
  const logits = Float64Array.from(
    tf.tidy(() => {
      const slots = tf.tensor2d(prepared.inputSlots, [prepared.batchSize, prepared.length], 'int32');
      return model.forward(slots).dataSync() as Float32Array;
    }),
  );
  const logProbs: number[] = [];
  const entropy: number[] = [];
  sequences.forEach((sequence, row) => {
    for (
      let position = sequence.tokens.length - sequence.responseLength;
      position < sequence.tokens.length;
      position++
    ) {
      const index = row * prepared.length + position - 1;
      const scaled = Array.from(
        logits.subarray(index * outputs, (index + 1) * outputs),
        (value) => value / temperature,
      );
      const max = Math.max(...scaled);
      const logNormalizer = max + Math.log(scaled.reduce((sum, value) => sum + Math.exp(value - max), 0));
      logProbs.push(scaled[prepared.targetClasses[index]!]! - logNormalizer);
      entropy.push(
        -scaled.reduce((sum, value) => sum + Math.exp(value - logNormalizer) * (value - logNormalizer), 0),
      );
    }
  });
  return { logProbs, entropy };
}

const mean = (values: readonly number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;

describe('EmbeddedTrainer: KL loss and entropy bonus', () => {
  it.each(['k1', 'k2', 'k3', 'low_var_kl'] as KlLossType[])(
    'matches the float64 reference loss with kl_loss_type %s and entropy_coef, across micro-batches',
    async (klLossType) => {
      const temperature = 0.8;
      const trainer = trainerFor({ temperature, maxMicroBatchTokens: 2 * prompt.length });
      const loss: LossConfig = {
        use_kl_loss: true,
        kl_loss_coef: 0.5,
        kl_loss_type: klLossType,
        entropy_coef: 0.03,
      };
      const options = { useKlLoss: true, klLossCoef: 0.5, klLossType, entropyCoef: 0.03 };
      try {
        // The first KL step freezes the starting weights as the reference.
        const reference = float64Policy(trainer.model, temperature).logProbs;
        const first = await trainer.train({ loss }, batch);
        expect(first.metrics!.kl_loss).toBe(0);
        // The second sees moved weights against the frozen reference.
        const { logProbs, entropy } = float64Policy(trainer.model, temperature);
        const expected = policyLossReference({ logProbs, entropy, refLogProbs: reference }, batch, options);
        const response = await trainer.train({ loss }, batch);
        expect(response.metrics!.micro_batches).toBeGreaterThan(1);
        expect(Math.abs(expected.metrics.kl_loss!)).toBeGreaterThan(1e-4);
        expect(expected.metrics.entropy_loss).toBeGreaterThan(1);
        expect(response.metrics!.loss).toBeCloseTo(expected.loss, 5);
        for (const name of ['pg_loss', 'kl_loss', 'entropy_loss', 'ppo_kl'] as const) {
          expect(response.metrics![name]).toBeCloseTo(expected.metrics[name]!, 5);
        }
      } finally {
        await trainer.dispose();
      }
    },
  );

  it('starts the KL at exactly 0, grows it as the weights move, and keeps tensors flat', async () => {
    const trainer = trainerFor();
    try {
      // Steps before the first KL step (a warm-start) move the weights the reference is taken from.
      await trainer.train({ loss: { loss_type: 'sft_loss', use_kl_loss: true } }, batch);
      const loss: LossConfig = {
        use_kl_loss: true,
        kl_loss_coef: 0.1,
        kl_loss_type: 'k3',
        entropy_coef: 0.01,
      };
      const kls: number[] = [];
      const tensors: number[] = [];
      for (let step = 0; step < 4; step++) {
        const response = await trainer.train({ loss }, batch);
        expect(response.optimizer_steps).toBe(1);
        kls.push(response.metrics!.kl_loss!);
        tensors.push(tf.memory().numTensors);
      }
      expect(kls[0]).toBe(0);
      for (let step = 1; step < kls.length; step++) expect(kls[step]).toBeGreaterThan(kls[step - 1]!);
      // Adam's moments appear at the first step; nothing accumulates after it.
      expect(new Set(tensors.slice(1)).size).toBe(1);
      // Without use_kl_loss the reference is neither used nor reported; it stays frozen for later.
      const plain = await trainer.train({}, batch);
      expect(plain.metrics!.kl_loss).toBeUndefined();
      expect(plain.metrics!.entropy_loss).toBeUndefined();
      expect((await trainer.train({ loss }, batch)).metrics!.kl_loss).toBeGreaterThan(kls.at(-1)!);
    } finally {
      await trainer.dispose();
    }
  });

  it('raises the entropy with entropy_coef > 0 against the same steps without it', async () => {
    const plain = trainerFor();
    const bonus = trainerFor();
    try {
      for (let step = 0; step < 4; step++) {
        await plain.train({}, batch);
        const response = await bonus.train({ loss: { entropy_coef: 0.5 } }, batch);
        expect(response.metrics!.entropy_loss).toBeGreaterThan(0);
      }
      const without = mean(float64Policy(plain.model).entropy);
      const withBonus = mean(float64Policy(bonus.model).entropy);
      expect(withBonus).toBeGreaterThan(without + 0.01);
    } finally {
      await plain.dispose();
      await bonus.dispose();
    }
  });

  it('keeps the reference through SaveCheckpoint / LoadCheckpoint', async () => {
    const first = trainerFor();
    const second = trainerFor();
    const loss: LossConfig = { use_kl_loss: true, kl_loss_coef: 0.1, kl_loss_type: 'low_var_kl' };
    try {
      await first.train({ loss }, batch);
      await first.train({ loss }, batch);
      const directory = join(scratch, 'with-reference');
      await first.saveCheckpoint({ path: directory });
      // The second trainer froze its own, different reference before loading.
      await second.train({ loss: { loss_type: 'sft_loss' } }, batch);
      await second.train({ loss }, batch);
      await second.loadCheckpoint({ path: directory });
      const resumed = await second.train({ loss }, batch);
      const original = await first.train({ loss }, batch);
      expect(original.metrics!.kl_loss).toBeGreaterThan(0);
      expect(resumed.metrics!.kl_loss).toBe(original.metrics!.kl_loss);
      expect(weightsEqual(second.model.getWeights(), first.model.getWeights())).toBe(true);

      // A checkpoint without a reference leaves none: the next KL step freezes the loaded weights.
      const fresh = trainerFor();
      const withoutReference = join(scratch, 'without-reference');
      try {
        await fresh.train({}, batch);
        await fresh.saveCheckpoint({ path: withoutReference });
      } finally {
        await fresh.dispose();
      }
      expect(
        JSON.parse(await readFile(join(withoutReference, trainerStateFile), 'utf8')).reference,
      ).toBeNull();
      await second.loadCheckpoint({ path: withoutReference });
      expect((await second.train({ loss }, batch)).metrics!.kl_loss).toBe(0);
    } finally {
      await first.dispose();
      await second.dispose();
    }
  });

  it('refuses a checkpoint whose reference is not finite, or does not match its hash', async () => {
    const trainer = trainerFor();
    const other = trainerFor();
    try {
      await trainer.train({ loss: { use_kl_loss: true } }, batch);
      const directory = join(scratch, 'nan-reference');
      await trainer.saveCheckpoint({ path: directory });
      const bytes = await readFile(join(directory, referenceStateFile));
      new DataView(bytes.buffer, bytes.byteOffset).setFloat32(4 * 5, Number.NaN, true);
      await writeFile(join(directory, referenceStateFile), bytes);
      await expect(other.loadCheckpoint({ path: directory })).rejects.toMatchObject({
        code: 'data_loss',
        message: expect.stringContaining('KL reference'),
      });
      const state = JSON.parse(await readFile(join(directory, trainerStateFile), 'utf8'));
      state.reference.sha256 = createHash('sha256').update(bytes).digest('hex');
      await writeFile(join(directory, trainerStateFile), JSON.stringify(state));
      const before = other.model.getWeights();
      await expect(other.loadCheckpoint({ path: directory })).rejects.toMatchObject({
        code: 'failed_precondition',
        message: expect.stringContaining('holds a non-finite number: KL reference embedding.token[5] is NaN'),
      });
      expect(weightsEqual(other.model.getWeights(), before)).toBe(true);
      expect(other.trainSteps).toBe(0);
    } finally {
      await trainer.dispose();
      await other.dispose();
    }
  });

  it('takes use_kl_loss and entropy_coef from the Train header over gRPC', async () => {
    const served = await startEmbeddedTrainerServer({ model: fixture.model, learningRate: 1e-2 });
    const client = createTrainerClient(served.address);
    try {
      const loss = { use_kl_loss: true, kl_loss_coef: 0.2, kl_loss_type: 'k2', entropy_coef: 0.01 };
      const first = await client.train(batch, { loss });
      const second = await client.train(batch, { loss });
      expect(first.metrics.kl_loss).toBe(0);
      expect(second.metrics.kl_loss).toBeGreaterThan(0);
      expect(second.metrics.entropy_loss).toBeGreaterThan(0);
      expect(second.metrics.loss).toBeCloseTo(
        second.metrics.pg_loss! - 0.01 * second.metrics.entropy_loss! + 0.2 * second.metrics.kl_loss!,
        6,
      );
    } finally {
      client.close();
      await served.close();
    }
  });
});
