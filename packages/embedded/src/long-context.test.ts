// Long contexts within the wasm backend's memory: agent CLIs send prompts of 16–32K tokens, and a
// single pass over such a sequence would hold `heads × length²` attention scores (gigabytes, past
// what wasm can address). The trainer's differentiable pass and the engine's reads attend in
// chunks of queries instead, with the same values as one pass.
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen3Tokenizer, vocabularyTexts } from './__fixtures__/embedded-fixture.js';
import { packSequences } from './__fixtures__/train-batch.js';
import { initializeBackend } from './backend.js';
import { CausalLanguageModel } from './model.js';
import { EmbeddedTrainer } from './trainer/embedded-trainer.js';
import { buildVocabulary, type TokenVocabulary } from './vocabulary.js';

let vocabulary: TokenVocabulary;
let ids: number[];

beforeAll(async () => {
  await initializeBackend({ backend: 'wasm' });
  const tokenizer = await qwen3Tokenizer();
  vocabulary = buildVocabulary({ tokenizer, texts: vocabularyTexts });
  ids = vocabularyTexts.flatMap((text) => Array.from(tokenizer.encode(text)));
});

afterAll(() => {
  tf.disposeVariables();
});

// `length` ids cycling through the vocabulary's texts.
function sequenceOf(length: number): number[] {
  return Array.from({ length }, (_, index) => ids[index % ids.length]!);
}

describe('long contexts', () => {
  // Chunked attention (and its recomputing gradient) against one pass, on a sequence of 300
  // positions in chunks of 64: the same logits and the same gradients.
  it.each(['rotary', 'alibi', 'sinusoidal'] as const)(
    'attends in chunks with the values and gradients of one pass (%s positions)',
    (positionEncoding) => {
      const model = CausalLanguageModel.create(vocabulary, {
        layerCount: 2,
        modelDimension: 16,
        headCount: 2,
        feedForwardDimension: 32,
        contextLength: 300,
        seed: 5,
        positionEncoding,
      });
      try {
        const batch = model.prepareBatch([sequenceOf(301), sequenceOf(201)]);
        const slots = tf.tensor2d(batch.inputSlots, [batch.batchSize, batch.length], 'int32');
        const targets = tf.oneHot(tf.tensor1d(batch.targetClasses, 'int32'), vocabulary.outputCount);
        const variables = [...model.parameters.values()];
        const pass = (attentionChunkLength: number) =>
          tf.variableGrads(() => {
            const logits = model.forward(slots, { differentiable: true, attentionChunkLength });
            return tf.logSoftmax(logits).mul(targets.reshape(logits.shape)).sum().neg() as tf.Scalar;
          }, variables);
        const whole = pass(Number.POSITIVE_INFINITY);
        const chunked = pass(64);
        expect(chunked.value.dataSync()[0]).toBeCloseTo(whole.value.dataSync()[0]!, 3);
        for (const [name, gradient] of Object.entries(whole.grads)) {
          const expected = gradient.dataSync();
          const actual = chunked.grads[name]!.dataSync();
          const scale = Math.max(1e-3, ...Array.from(expected, Math.abs));
          let worst = 0;
          for (let index = 0; index < expected.length; index++)
            worst = Math.max(worst, Math.abs(actual[index]! - expected[index]!) / scale);
          expect(worst, name).toBeLessThan(1e-4);
        }
        const logits = (chunkLength: number) =>
          model.forward(slots, { attentionChunkLength: chunkLength }).dataSync();
        const oneStep = logits(Number.POSITIVE_INFINITY);
        const inChunks = logits(64);
        let largest = 0;
        for (let index = 0; index < oneStep.length; index++)
          largest = Math.max(largest, Math.abs(inChunks[index]! - oneStep[index]!));
        expect(largest).toBeLessThan(1e-5);
        tf.dispose([slots, targets, whole.value, chunked.value, whole.grads, chunked.grads]);
      } finally {
        model.dispose();
      }
    },
    120_000,
  );

  it('trains a 16K-token sample and reads its logprobs on the wasm backend', async () => {
    const length = 16_384;
    const model = CausalLanguageModel.create(vocabulary, {
      layerCount: 1,
      modelDimension: 16,
      headCount: 2,
      feedForwardDimension: 32,
      contextLength: length,
      seed: 3,
    });
    const trainer = new EmbeddedTrainer({ model, learningRate: 1e-3 });
    try {
      const sequence = { tokens: sequenceOf(length), responseLength: 64 };
      const batch = packSequences(model, [sequence]);
      const response = await trainer.train({ rollout_id: 0 }, batch);
      expect(response.samples_trained).toBe(1);
      expect(Number.isFinite(response.metrics?.loss ?? Number.NaN)).toBe(true);
      // On-policy: the trainer's recomputed logprobs match the ones read before it.
      expect(response.metrics?.train_rollout_logprob_abs_diff_max).toBeLessThan(1e-4);
    } finally {
      await trainer.dispose();
    }
  }, 600_000);
});
