import { DressageError } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { selectBackend } from './backend.js';
import { policyLoss, policyLossGradients } from './policy-loss.js';
import type { PolicyLossBatch, PolicyLossOptions } from './policy-loss-options.js';
import { policyLossReference } from './policy-loss-reference.js';

// A small seeded generator (mulberry32), so failures reproduce.
function generator(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface RandomCase {
  batch: PolicyLossBatch;
  logProbs: Float32Array;
  oldLogProbs: Float32Array;
  entropy: Float32Array;
  refLogProbs: Float32Array;
}

function randomCase(seed: number, samples = 12, maxResponse = 24): RandomCase {
  const random = generator(seed);
  const responseLengths = new Int32Array(samples);
  for (let i = 0; i < samples; i++) responseLengths[i] = Math.floor(random() * (maxResponse + 1));
  const n = responseLengths.reduce((sum, length) => sum + length, 0);
  const masks = new Uint8Array(n);
  const denominators = new Float64Array(samples);
  let offset = 0;
  for (let i = 0; i < samples; i++) {
    const length = responseLengths[i] as number;
    const dead = random() < 0.15;
    let count = 0;
    for (let t = offset; t < offset + length; t++) {
      masks[t] = !dead && random() < 0.75 ? 1 : 0;
      count += masks[t] as number;
    }
    // Denominators below 1 on purpose (prompt-equal ones often are); zero where nothing trains.
    denominators[i] = count === 0 && random() < 0.5 ? 0 : 0.2 + random() * 8;
    offset += length;
  }
  const rollout = new Float32Array(n);
  const logProbs = new Float32Array(n);
  const oldLogProbs = new Float32Array(n);
  const entropy = new Float32Array(n);
  const refLogProbs = new Float32Array(n);
  for (let t = 0; t < n; t++) {
    rollout[t] = -random() * 3;
    logProbs[t] = (rollout[t] as number) + (random() - 0.5) * 0.8;
    oldLogProbs[t] = (logProbs[t] as number) + (random() - 0.5) * 0.6;
    entropy[t] = random() * 2;
    refLogProbs[t] = (logProbs[t] as number) + (random() - 0.5) * 1.5;
  }
  const rewards = new Float32Array(samples);
  const rolloutIds = new Int32Array(samples);
  for (let i = 0; i < samples; i++) {
    rewards[i] = (random() - 0.5) * 4;
    rolloutIds[i] = Math.floor(i / 2);
  }
  return {
    batch: {
      sample_count: samples,
      response_lengths: responseLengths,
      loss_masks: masks,
      rollout_log_probs: rollout,
      rewards,
      rollout_mask_sums: denominators,
      rollout_ids: rolloutIds,
    },
    logProbs,
    oldLogProbs,
    entropy,
    refLogProbs,
  };
}

const configurations: [string, PolicyLossOptions, boolean][] = [
  ['PPO clip (defaults)', {}, true],
  ['asymmetric and dual clip', { epsClip: 0.2, epsClipHigh: 0.28, epsClipC: 3 }, true],
  ['TIS', { useTis: true, tisClip: 1.5, tisClipLow: 0.5 }, true],
  ['KL k1 + entropy', { useKlLoss: true, klLossCoef: 0.1, klLossType: 'k1', entropyCoef: 0.01 }, true],
  ['KL k2', { useKlLoss: true, klLossCoef: 0.2, klLossType: 'k2' }, true],
  ['KL k3', { useKlLoss: true, klLossCoef: 0.2, klLossType: 'k3' }, true],
  [
    'KL low_var_kl, dual clip, TIS',
    { useKlLoss: true, klLossCoef: 0.3, klLossType: 'low_var_kl', epsClipC: 2, useTis: true },
    true,
  ],
  ['per-token reducer', { calculatePerTokenLoss: true, entropyCoef: 0.05 }, true],
  ['per-token reducer, explicit normaliser', { calculatePerTokenLoss: true, tokenNormalizer: 1000 }, true],
  ['rollout logprobs as the old policy', { useRolloutLogProbs: true, globalBatchSize: 3 }, true],
  ['old policy = current, gradients stopped', { useTis: true }, false],
];

function closeTo(actual: number, expected: number, tolerance: number): boolean {
  return Math.abs(actual - expected) <= tolerance * Math.max(1, Math.abs(expected));
}

describe.each(['cpu', 'wasm'] as const)(
  'policyLoss on the %s backend matches the float64 reference',
  (backend) => {
    beforeAll(async () => {
      await selectBackend({ preference: backend, log: () => {} });
    });

    it.each(configurations)('%s, on 20 seeded random batches, within 1e-5', (_name, options, withOld) => {
      let worst = 0;
      for (let seed = 1; seed <= 20; seed++) {
        const data = randomCase(seed);
        const reference = policyLossReference(
          {
            logProbs: data.logProbs,
            entropy: data.entropy,
            refLogProbs: data.refLogProbs,
            ...(withOld ? { oldLogProbs: data.oldLogProbs } : {}),
          },
          data.batch,
          options,
        );
        const before = tf.memory().numTensors;
        const logProbs = tf.tensor1d(data.logProbs);
        const entropy = tf.tensor1d(data.entropy);
        const result = policyLoss(
          {
            logProbs,
            entropy,
            refLogProbs: data.refLogProbs,
            ...(withOld ? { oldLogProbs: data.oldLogProbs } : {}),
          },
          data.batch,
          options,
        );
        expect(Object.keys(result.metrics).sort()).toEqual(Object.keys(reference.metrics).sort());
        for (const [name, metric] of Object.entries(result.metrics)) {
          const actual = metric?.dataSync()[0] as number;
          const expected = reference.metrics[name as keyof typeof reference.metrics] as number;
          worst = Math.max(worst, Math.abs(actual - expected) / Math.max(1, Math.abs(expected)));
          expect(closeTo(actual, expected, 1e-5), `${name} seed ${seed}: ${actual} vs ${expected}`).toBe(
            true,
          );
        }
        tf.dispose([logProbs, entropy, result.loss, ...Object.values(result.metrics)]);
        expect(tf.memory().numTensors).toBe(before);
      }
      expect(worst).toBeLessThanOrEqual(1e-5);
    });
  },
);

describe('policyLoss gradients', () => {
  beforeAll(async () => {
    await selectBackend({ preference: 'cpu', log: () => {} });
  });

  it('match central finite differences of the float64 reference on a tiny batch', () => {
    const data = randomCase(7, 3, 5);
    const options: PolicyLossOptions = {
      epsClip: 0.2,
      epsClipHigh: 0.28,
      epsClipC: 3,
      useTis: true,
      useKlLoss: true,
      klLossType: 'k3',
      klLossCoef: 0.1,
      entropyCoef: 0.01,
    };
    const referenceLoss = (logProbs: Float64Array, entropy: Float64Array) =>
      policyLossReference(
        { logProbs, entropy, oldLogProbs: data.oldLogProbs, refLogProbs: data.refLogProbs },
        data.batch,
        options,
      ).loss;
    const [logProbGradient, entropyGradient] = tf.grads(
      (logProbs: tf.Tensor, entropy: tf.Tensor) =>
        policyLoss(
          {
            logProbs: logProbs as tf.Tensor1D,
            entropy: entropy as tf.Tensor1D,
            oldLogProbs: data.oldLogProbs,
            refLogProbs: data.refLogProbs,
          },
          data.batch,
          options,
        ).loss,
    )([tf.tensor1d(data.logProbs), tf.tensor1d(data.entropy)]);
    const analytic = [logProbGradient?.dataSync(), entropyGradient?.dataSync()] as Float32Array[];
    const point = [Float64Array.from(data.logProbs), Float64Array.from(data.entropy)] as const;
    const h = 1e-6;
    let nonZero = 0;
    for (const which of [0, 1] as const) {
      for (let t = 0; t < point[which].length; t++) {
        const plus = [Float64Array.from(point[0]), Float64Array.from(point[1])];
        const minus = [Float64Array.from(point[0]), Float64Array.from(point[1])];
        (plus[which] as Float64Array)[t] = (point[which][t] as number) + h;
        (minus[which] as Float64Array)[t] = (point[which][t] as number) - h;
        const numeric =
          (referenceLoss(plus[0] as Float64Array, plus[1] as Float64Array) -
            referenceLoss(minus[0] as Float64Array, minus[1] as Float64Array)) /
          (2 * h);
        const got = analytic[which]?.[t] as number;
        if (Math.abs(numeric) > 1e-8) nonZero += 1;
        expect(
          closeTo(got, numeric, 1e-4),
          `d/d${which === 0 ? 'logProbs' : 'entropy'}[${t}]: ${got} vs ${numeric}`,
        ).toBe(true);
      }
    }
    expect(nonZero).toBeGreaterThan(3);
  });

  it('policyLossGradients returns gradients, loss and metrics without leaking tensors', () => {
    const data = randomCase(3, 4, 6);
    const logits = tf.variable(tf.tensor1d(data.logProbs), true, 'logits');
    const before = tf.memory().numTensors;
    const result = policyLossGradients(() => ({ logProbs: tf.mul(logits, 1) as tf.Tensor1D }), data.batch, {
      useTis: true,
    });
    expect(result.gradients.logits?.shape).toEqual([data.logProbs.length]);
    const reference = policyLossReference({ logProbs: data.logProbs }, data.batch, { useTis: true });
    expect(closeTo(result.loss, reference.loss, 1e-5)).toBe(true);
    expect(closeTo(result.metrics.tis as number, reference.metrics.tis as number, 1e-5)).toBe(true);
    tf.dispose(Object.values(result.gradients));
    expect(tf.memory().numTensors).toBe(before);
    logits.dispose();
  });
});

describe('exact denominators (prompt-equal weighting survives the trainer)', () => {
  it('gives every prompt the same total weight, even with denominators below 1', () => {
    // Two prompts, global batch size 4: p1 has 7 trainable tokens over three samples, p2 has 4.
    // Denominators M_P × N / gbs = [3.5, 3.5, 3.5, 2.0]; with slime's max(d, 1) they would be unchanged,
    // so shrink gbs to 16 (denominators 0.875 and 0.5) to exercise the case max(d, 1) gets wrong.
    const batch: PolicyLossBatch = {
      sample_count: 4,
      response_lengths: Int32Array.from([3, 3, 2, 4]),
      loss_masks: Uint8Array.from([1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]),
      rollout_log_probs: null,
      rewards: Float32Array.from([1, 1, 1, 1]),
      rollout_mask_sums: Float64Array.from([0.875, 0.875, 0.875, 0.5]),
      rollout_ids: Int32Array.from([0, 0, 1, 2]),
    };
    const perToken = Float64Array.from([1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]);
    const contribution = (which: 'p1' | 'p2') => {
      const values = perToken.map((value, t) => (t < 8 === (which === 'p1') ? value : 0));
      return policyLossReference({ logProbs: new Float64Array(12), entropy: values }, batch, {
        entropyCoef: 1,
        globalBatchSize: 16,
      }).metrics.entropy_loss as number;
    };
    expect(contribution('p1')).toBeCloseTo(0.5, 12);
    expect(contribution('p2')).toBeCloseTo(0.5, 12);
  });

  it('rejects a sample with trainable tokens and no denominator', () => {
    const batch: PolicyLossBatch = {
      sample_count: 1,
      response_lengths: Int32Array.from([2]),
      loss_masks: Uint8Array.from([1, 0]),
      rollout_log_probs: null,
      rewards: Float32Array.from([1]),
      rollout_mask_sums: Float64Array.from([0]),
      rollout_ids: Int32Array.from([0]),
    };
    expect(() => policyLossReference({ logProbs: [0, 0] }, batch)).toThrow(/loss denominator 0/);
    expect(() => policyLoss({ logProbs: tf.tensor1d([0, 0]) }, batch)).toThrow(/loss denominator 0/);
  });

  it('rejects inconsistent options', () => {
    const { batch, logProbs } = randomCase(1);
    expect(() => policyLossReference({ logProbs }, batch, { epsClipC: 0.5 })).toThrow(/greater than 1/);
    expect(() =>
      policyLossReference({ logProbs }, batch, { useTis: true, useRolloutLogProbs: true }),
    ).toThrow(/cannot be combined/);
    expect(() => policyLossReference({ logProbs }, batch, { useKlLoss: true })).toThrow(/refLogProbs/);
  });

  it.each([
    [{ epsClip: -0.1 }, 'loss.eps_clip'],
    [{ epsClipHigh: -5 }, 'loss.eps_clip_high'],
    [{ epsClip: Number.NaN }, 'loss.eps_clip'],
    [{ tisClip: Number.POSITIVE_INFINITY }, 'loss.tis_clip'],
    [{ klLossCoef: -1 }, 'loss.kl_loss_coef'],
    [{ entropyCoef: Number.NaN }, 'loss.entropy_coef'],
  ] as const)('rejects %o as invalid_argument naming %s (not a clip error)', (options, field) => {
    const { batch, logProbs } = randomCase(1);
    let caught: unknown;
    try {
      policyLoss({ logProbs: tf.tensor1d(logProbs) }, batch, options);
    } catch (error) {
      caught = error;
    }
    expect(DressageError.isInstance(caught)).toBe(true);
    expect((caught as DressageError).code).toBe('invalid_argument');
    expect((caught as DressageError).message).toContain(field);
  });
});
