import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { smallConfig, testVocabulary } from './__fixtures__/embedded-fixture.js';
import { initializeBackend } from './backend.js';
import { weightsEqual } from './checkpoint.js';
import { CausalLanguageModel } from './model.js';
import { modelConfigSchema, resolveModelConfig } from './model-config.js';
import { disposeCache } from './sequence-cache.js';
import { SupervisedTrainer } from './supervised-trainer.js';
import type { TokenVocabulary } from './vocabulary.js';

let vocabulary: TokenVocabulary;

beforeAll(async () => {
  await initializeBackend();
  vocabulary = await testVocabulary();
});

function sequence(length: number, offset: number): number[] {
  return Array.from(
    { length },
    (_, index) => vocabulary.tokenIds[(index * 5 + offset) % vocabulary.outputCount]!,
  );
}

function logprobRow(logits: tf.Tensor2D, row: number): Float32Array {
  const values = tf.tidy(() => tf.logSoftmax(logits).dataSync() as Float32Array);
  const outputs = vocabulary.outputCount;
  return values.slice(row * outputs, (row + 1) * outputs);
}

describe('CausalLanguageModel', () => {
  it('initializes deterministically from its seed', () => {
    const first = CausalLanguageModel.create(vocabulary, smallConfig);
    const second = CausalLanguageModel.create(vocabulary, smallConfig);
    const other = CausalLanguageModel.create(vocabulary, { ...smallConfig, seed: 8 });
    expect(weightsEqual(first.getWeights(), second.getWeights())).toBe(true);
    expect(weightsEqual(first.getWeights(), other.getWeights())).toBe(false);
    expect(first.parameterCount).toBeGreaterThan(10_000);
    for (const model of [first, second, other]) model.dispose();
  });

  it('scales the initialization by fan-in, or by 0.02 for the small scheme', () => {
    const standardDeviation = (values: Float32Array) =>
      Math.sqrt(values.reduce((sum, value) => sum + value * value, 0) / values.length);
    const fanIn = CausalLanguageModel.create(vocabulary, { ...smallConfig, initialization: 'fan_in' });
    const small = CausalLanguageModel.create(vocabulary, { ...smallConfig, initialization: 'small' });
    const width = smallConfig.modelDimension ?? 64;
    const query = (model: CausalLanguageModel) => model.getWeights().get('layers.0.attention.query')!;
    expect(standardDeviation(query(fanIn))).toBeCloseTo(1 / Math.sqrt(width), 1);
    expect(standardDeviation(query(small))).toBeCloseTo(0.02, 2);
    expect(standardDeviation(fanIn.getWeights().get('embedding.token')!)).toBeGreaterThan(0.8);
    fanIn.dispose();
    small.dispose();
  });

  it('reads checkpoints written before positions and initialization were chosen as sinusoidal and small', () => {
    const parsed = modelConfigSchema.parse({
      modelDimension: 32,
      layerCount: 1,
      headCount: 2,
      feedForwardDimension: 64,
      contextLength: 128,
      seed: 1,
    });
    expect(parsed.positionEncoding).toBe('sinusoidal');
    expect(parsed.initialization).toBe('small');
    expect(resolveModelConfig({}).positionEncoding).toBe('rotary');
    expect(() => resolveModelConfig({ modelDimension: 6, headCount: 2 })).toThrow(/even head width/);
  });

  it.each(['rotary', 'alibi', 'sinusoidal'] as const)(
    'decodes with the KV cache to the logprobs of a full forward pass, batched over ragged rows (%s positions)',
    (positionEncoding) => {
      const model = CausalLanguageModel.create(vocabulary, { ...smallConfig, positionEncoding });
      const rows = [sequence(60, 1), sequence(70, 3), sequence(50, 7), sequence(90, 2)];
      const reference = model.sequenceLogprobs(rows);
      const before = tf.memory().numTensors;
      const batch = model.createDecodeBatch<number>();
      const positions = [5, 40, 1, 30];
      let maxDiff = 0;
      const join = (index: number) => {
        const { cache, logits } = model.prefill(vocabulary.slotsOf(rows[index]!.slice(0, positions[index])));
        const first = logprobRow(logits, 0)[vocabulary.outputClassOf(rows[index]![positions[index]!]!)]!;
        maxDiff = Math.max(maxDiff, Math.abs(first - reference[index]![positions[index]! - 1]!));
        logits.dispose();
        batch.add(index, cache);
      };
      [0, 1, 2].forEach(join);
      for (let step = 0; step < 24; step++) {
        // Rows come and go: row 1 (the longest) leaves, row 3 joins late; holes and compaction follow.
        if (step === 8) batch.remove(1);
        if (step === 10) join(3);
        const owners = batch.owners;
        const logits = batch.step(owners.map((index) => vocabulary.slotOf(rows[index]![positions[index]!]!)));
        owners.forEach((index, row) => {
          const position = positions[index]!;
          const value = logprobRow(logits, row)[vocabulary.outputClassOf(rows[index]![position + 1]!)]!;
          maxDiff = Math.max(maxDiff, Math.abs(value - reference[index]![position]!));
          positions[index] = position + 1;
          expect(batch.lengthOf(index)).toBe(position + 1);
        });
        logits.dispose();
      }
      expect(maxDiff).toBeLessThan(1e-5);
      expect(batch.owners).toEqual([0, 2, 3]);
      // Row 1 left 40 positions of holes; the batch compacted them away.
      expect(batch.columns).toBeLessThan(60);
      batch.clear();
      expect(tf.memory().numTensors).toBe(before);
      model.dispose();
    },
  );

  it.each(['rotary', 'alibi', 'sinusoidal'] as const)(
    'prefills in chunks to the logits and cache of one pass, then decodes on from them (%s positions)',
    (positionEncoding) => {
      const model = CausalLanguageModel.create(vocabulary, { ...smallConfig, positionEncoding });
      const prompt = vocabulary.slotsOf(sequence(150, 4));
      const before = tf.memory().numTensors;
      const whole = model.prefill(prompt, { allPositions: true, chunkLength: 1000 });
      // Chunks of 16 (the last one short), and a chunk of one position at a time.
      for (const chunkLength of [16, 1]) {
        const chunked = model.prefill(prompt, { allPositions: true, chunkLength });
        expect(chunked.logits.shape).toEqual([150, vocabulary.outputCount]);
        expect(chunked.cache.length).toBe(150);
        const difference = (left: tf.Tensor, right: tf.Tensor) =>
          tf.tidy(() => left.sub(right).abs().max().dataSync()[0]!);
        expect(difference(chunked.logits, whole.logits)).toBeLessThan(1e-4);
        chunked.cache.keys.forEach((key, layer) => {
          expect(key.shape).toEqual(whole.cache.keys[layer]!.shape);
          expect(difference(key, whole.cache.keys[layer]!)).toBeLessThan(1e-4);
          expect(difference(chunked.cache.values[layer]!, whole.cache.values[layer]!)).toBeLessThan(1e-4);
        });
        // Only the last position's logits unless asked for all.
        const last = model.prefill(prompt, { chunkLength });
        expect(last.logits.shape).toEqual([1, vocabulary.outputCount]);
        const lastRow = whole.logits.slice([149, 0], [1, -1]);
        expect(difference(last.logits, lastRow)).toBeLessThan(1e-4);
        lastRow.dispose();
        // A decode step from the chunked cache continues the sequence.
        const batch = model.createDecodeBatch<number>();
        batch.add(0, chunked.cache);
        const next = batch.step([prompt[0]!]);
        expect(next.shape).toEqual([1, vocabulary.outputCount]);
        expect(Number.isFinite(tf.tidy(() => next.sum().dataSync()[0]!))).toBe(true);
        next.dispose();
        batch.clear();
        chunked.logits.dispose();
        last.logits.dispose();
        disposeCache(last.cache);
      }
      whole.logits.dispose();
      disposeCache(whole.cache);
      expect(tf.memory().numTensors).toBe(before);
      expect(() => model.prefill(prompt, { chunkLength: 0 })).toThrow(/chunkLength/);
      model.dispose();
    },
  );

  it('prefills a prompt of thousands of tokens, which one pass cannot hold, with bounded memory', () => {
    // 6,000 positions in one pass take heads × 6,000² floats of scores per layer (about 0.6 GB
    // live at once); the wasm backend failed there ("memory access out of bounds").
    const model = CausalLanguageModel.create(vocabulary, { ...smallConfig, contextLength: 8192 });
    const prompt = vocabulary.slotsOf(sequence(6000, 2));
    const { cache, logits } = model.prefill(prompt);
    expect(cache.length).toBe(6000);
    expect(cache.keys[0]!.shape).toEqual([smallConfig.headCount, 6000, 32 / smallConfig.headCount!]);
    const row = logprobRow(logits, 0);
    expect(row.every(Number.isFinite)).toBe(true);
    expect(Math.abs(row.reduce((sum, value) => sum + Math.exp(value), 0) - 1)).toBeLessThan(1e-4);
    logits.dispose();
    disposeCache(cache);
    model.dispose();
  });

  it('gives identical logits through the one-hot (differentiable) and gather embeddings', () => {
    const model = CausalLanguageModel.create(vocabulary, smallConfig);
    const batch = model.prepareBatch([sequence(20, 2), sequence(12, 4)]);
    const [gathered, oneHot] = tf.tidy(() => {
      const slots = tf.tensor2d(batch.inputSlots, [batch.batchSize, batch.length], 'int32');
      return [model.forward(slots).dataSync(), model.forward(slots, { differentiable: true }).dataSync()];
    });
    expect(Array.from(oneHot!)).toEqual(Array.from(gathered!));
    model.dispose();
  });

  it('reports NaN for targets outside the vocabulary and maps them to the unknown slot', () => {
    const model = CausalLanguageModel.create(vocabulary, smallConfig);
    const unknown = 7_000_000;
    expect(vocabulary.slotOf(unknown)).toBe(0);
    const [logprobs] = model.sequenceLogprobs([[vocabulary.tokenIds[0]!, unknown, vocabulary.tokenIds[1]!]]);
    expect(Number.isNaN(logprobs![0]!)).toBe(true);
    expect(Number.isFinite(logprobs![1]!)).toBe(true);
    model.dispose();
  });

  it('swaps weights atomically and rejects weights that do not fit', () => {
    const model = CausalLanguageModel.create(vocabulary, smallConfig);
    const donor = CausalLanguageModel.create(vocabulary, { ...smallConfig, seed: 99 });
    const original = model.getWeights();
    const broken = new Map(donor.getWeights());
    broken.set('output.bias', new Float32Array(3));
    expect(() => model.setWeights(broken)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(weightsEqual(model.getWeights(), original)).toBe(true);
    model.setWeights(donor.getWeights());
    expect(weightsEqual(model.getWeights(), donor.getWeights())).toBe(true);
    model.dispose();
    donor.dispose();
  });
});

describe('SupervisedTrainer', () => {
  it('lowers the masked cross-entropy with gradients reaching every parameter, without leaking tensors', () => {
    const model = CausalLanguageModel.create(vocabulary, smallConfig);
    const trainer = new SupervisedTrainer(model, { learningRate: 1e-2 });
    const examples = [0, 1, 2, 3].map((offset) => {
      const tokenIds = sequence(24, offset);
      // Learn only the second half: the first is context.
      return { tokenIds, lossMask: tokenIds.map((_, index) => (index >= 12 ? 1 : 0)) };
    });
    const initial = model.getWeights();
    const first = trainer.step(examples);
    expect(first.tokens).toBe(4 * 12);
    expect(first.gradientNorm).toBeGreaterThan(0);
    const after = model.getWeights();
    for (const [name, values] of initial)
      expect(weightsEqual(new Map([[name, values]]), new Map([[name, after.get(name)!]])), name).toBe(false);
    const tensors = tf.memory().numTensors;
    let last = first.loss;
    for (let step = 0; step < 15; step++) last = trainer.step(examples).loss;
    expect(tf.memory().numTensors).toBe(tensors);
    expect(last).toBeLessThan(first.loss * 0.7);
    trainer.dispose();
    model.dispose();
  });
});
