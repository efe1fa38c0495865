import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type PolicyLossBatch, type PolicyLossOptions, policyLossReference } from '@dressage/trainer-bridge';
import { describe, expect, it } from 'vitest';
import { appRoot } from './worker-process.js';

// The float64 reference's loss and metrics on one batch under every loss setting; the Python
// worker's torch loss (tests/test_policy_loss.py) must reproduce them from the same inputs.
const fixturePath = join(appRoot, 'tests/fixtures/policy-loss.json');

const responseLengths = [3, 4, 2, 5, 3, 1, 4];
const tokens = responseLengths.reduce((sum, length) => sum + length, 0);
// Holes in the masks, and sample 5 with no trainable token (denominator 0: it contributes nothing).
const lossMasks = Uint8Array.from({ length: tokens }, (_, index) =>
  index === 17 || index % 5 === 3 ? 0 : 1,
);
const batch: PolicyLossBatch = {
  sample_count: responseLengths.length,
  response_lengths: Int32Array.from(responseLengths),
  loss_masks: lossMasks,
  rollout_log_probs: Float32Array.from({ length: tokens }, (_, index) => -0.1 - ((index * 37) % 23) / 10),
  rewards: Float32Array.from([1.25, -0.75, 0.5, -1.5, 0.875, 0.3, -0.2]),
  // Prompt-equal denominators, several below 1 (exact division, no max(d, 1)).
  rollout_mask_sums: Float64Array.from([0.4, 0.4, 0.75, 2.5, 0.75, 0, 1.6]),
  rollout_ids: Int32Array.from([0, 0, 1, 2, 3, 4, 5]),
};
const wave = (index: number, phase: number) => Math.sin(index * 1.7 + phase);
const inputs = {
  logProbs: Array.from(
    { length: tokens },
    (_, index) => -0.2 - ((index * 37) % 23) / 10 + 0.3 * wave(index, 0),
  ),
  oldLogProbs: Array.from(
    { length: tokens },
    (_, index) => -0.1 - ((index * 37) % 23) / 10 + 0.05 * wave(index, 1),
  ),
  entropy: Array.from({ length: tokens }, (_, index) => 1.5 + wave(index, 2)),
  refLogProbs: Array.from(
    { length: tokens },
    (_, index) => -0.3 - ((index * 37) % 23) / 10 + 0.4 * wave(index, 3),
  ),
};

const cases: { name: string; options: PolicyLossOptions; withOld: boolean }[] = [
  { name: 'defaults, old = current', options: {}, withOld: false },
  { name: 'asymmetric clip', options: { epsClip: 0.1, epsClipHigh: 0.3 }, withOld: true },
  { name: 'dual clip', options: { epsClip: 0.05, epsClipC: 1.5 }, withOld: true },
  { name: 'TIS with both bounds', options: { useTis: true, tisClip: 1.02, tisClipLow: 0.98 }, withOld: true },
  { name: 'TIS, old = current', options: { useTis: true }, withOld: false },
  { name: 'KL k1', options: { useKlLoss: true, klLossCoef: 0.1, klLossType: 'k1' }, withOld: true },
  { name: 'KL k2', options: { useKlLoss: true, klLossCoef: 0.2, klLossType: 'k2' }, withOld: true },
  { name: 'KL k3', options: { useKlLoss: true, klLossCoef: 0.3, klLossType: 'k3' }, withOld: true },
  {
    name: 'KL low_var_kl',
    options: { useKlLoss: true, klLossCoef: 0.3, klLossType: 'low_var_kl' },
    withOld: true,
  },
  { name: 'entropy bonus', options: { entropyCoef: 0.01 }, withOld: true },
  { name: 'per-token reducer', options: { calculatePerTokenLoss: true }, withOld: true },
  {
    name: 'per-token reducer, step normalizer',
    options: { calculatePerTokenLoss: true, tokenNormalizer: 50 },
    withOld: true,
  },
  { name: 'rollout logprobs as old', options: { useRolloutLogProbs: true }, withOld: false },
  { name: 'step of 12 rollouts', options: { globalBatchSize: 12, epsClipHigh: 0.28 }, withOld: true },
];

function compute() {
  return {
    batch: {
      response_lengths: Array.from(batch.response_lengths),
      loss_masks: Array.from(batch.loss_masks),
      rollout_log_probs: Array.from(batch.rollout_log_probs as Float32Array),
      rewards: Array.from(batch.rewards),
      rollout_mask_sums: Array.from(batch.rollout_mask_sums),
      rollout_ids: Array.from(batch.rollout_ids),
    },
    inputs,
    cases: cases.map(({ name, options, withOld }) => {
      const { metrics } = policyLossReference(
        {
          logProbs: inputs.logProbs,
          entropy: inputs.entropy,
          ...(withOld ? { oldLogProbs: inputs.oldLogProbs } : {}),
          ...(options.useKlLoss ? { refLogProbs: inputs.refLogProbs } : {}),
        },
        batch,
        options,
      );
      return { name, options, with_old: withOld, expected: metrics };
    }),
  };
}

describe('the shared policy-loss fixture (the Python torch loss checks the same values)', () => {
  it('holds what the TypeScript float64 reference computes', () => {
    const computed = compute();
    // DRESSAGE_WRITE_FIXTURES=1 rewrites the file after a deliberate change of the reference.
    if (process.env.DRESSAGE_WRITE_FIXTURES === '1')
      writeFileSync(fixturePath, `${JSON.stringify(computed, null, 1)}\n`);
    const stored = JSON.parse(readFileSync(fixturePath, 'utf8')) as ReturnType<typeof compute>;
    expect(stored.batch).toEqual(computed.batch);
    expect(stored.inputs).toEqual(computed.inputs);
    expect(stored.cases).toEqual(computed.cases);
  });

  it('exercises clipping, TIS clipping and denominators below 1', () => {
    const { cases: computed } = compute();
    const metric = (name: string, key: string) =>
      computed.find((entry) => entry.name === name)?.expected[key as 'loss'];
    expect(metric('asymmetric clip', 'pg_clipfrac')).toBeGreaterThan(0);
    expect(metric('TIS with both bounds', 'tis_clipfrac')).toBeGreaterThan(0);
    expect(Array.from(batch.rollout_mask_sums).some((value) => value > 0 && value < 1)).toBe(true);
  });
});
