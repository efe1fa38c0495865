// Property tests over random multi-segment batches (seeded, so failures reproduce).
import { createSample, type Sample } from '@dressage/protocol';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { convertSamplesToTrainData } from './convert.js';
import { rewardPostProcess, STANDARD_DEVIATION_EPSILON } from './reward-post-process.js';

const SEED = 20_260_829;

interface TokenSpec {
  trainable: 0 | 1;
  value: number;
}
interface SegmentSpec {
  tokens: TokenSpec[];
  removed: boolean;
}
interface TrajectorySpec {
  segments: SegmentSpec[];
  reward: number;
  removed: boolean;
}

const tokensArbitrary: fc.Arbitrary<TokenSpec[]> = fc.array(
  fc.record({
    trainable: fc.constantFrom<0 | 1>(0, 1, 1),
    value: fc.double({ min: -10, max: 10, noNaN: true, noDefaultInfinity: true }),
  }),
  { maxLength: 8 },
);

// About one in ten segments or trajectories is removed.
const weightedRemoval = fc.integer({ min: 0, max: 9 }).map((value) => value === 0);

const trajectoryArbitrary: fc.Arbitrary<TrajectorySpec> = fc.record({
  segments: fc.array(fc.record<SegmentSpec>({ tokens: tokensArbitrary, removed: weightedRemoval }), {
    minLength: 1,
    maxLength: 4,
  }),
  reward: fc.oneof(fc.integer({ min: -3, max: 3 }), fc.double({ min: -5, max: 5, noNaN: true })),
  removed: weightedRemoval,
});

const batchArbitrary = fc.record({
  prompts: fc.array(fc.array(trajectoryArbitrary, { minLength: 1, maxLength: 4 }), {
    minLength: 1,
    maxLength: 6,
  }),
  globalBatchSize: fc.integer({ min: 1, max: 32 }),
  order: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
});

type BatchValue = typeof batchArbitrary extends fc.Arbitrary<infer T> ? T : never;

interface Built {
  samples: Sample[];
  values: number[][];
}

// Samples in a shuffled order: the properties must not depend on where segments sit in the batch.
function build(batch: BatchValue): Built {
  const entries: { sample: Sample; values: number[] }[] = [];
  let index = 0;
  batch.prompts.forEach((trajectories, prompt) => {
    trajectories.forEach((trajectory, trajectoryNumber) => {
      const last = trajectory.segments.length - 1;
      const rolloutId = index;
      trajectory.segments.forEach((segment, segmentIndex) => {
        const mask = segment.tokens.map((token) => token.trainable);
        entries.push({
          values: segment.tokens.map((token) => token.value),
          sample: createSample({
            index: index++,
            group_index: prompt,
            rollout_id: rolloutId,
            tokens: [1, ...mask.map(() => 2)],
            response_length: mask.length,
            loss_mask: mask,
            reward: segmentIndex === last ? trajectory.reward : 0,
            remove_sample: trajectory.removed || segment.removed,
            metadata: {
              parent_traj_id: `p${prompt}-t${trajectoryNumber}`,
              instance_id: `p${prompt}`,
              segment_index: segmentIndex,
            },
          }),
        });
      });
    });
  });
  let state = batch.order || 1;
  for (let i = entries.length - 1; i > 0; i--) {
    state = (state * 48_271) % 2_147_483_647;
    const j = state % (i + 1);
    [entries[i], entries[j]] = [
      entries[j] as (typeof entries)[number],
      entries[i] as (typeof entries)[number],
    ];
  }
  return { samples: entries.map((entry) => entry.sample), values: entries.map((entry) => entry.values) };
}

function expectClose(actual: number, expected: number): void {
  expect(Math.abs(actual - expected)).toBeLessThanOrEqual(1e-9 * Math.max(1, Math.abs(expected)));
}

describe('prompt-equal weighting (property)', () => {
  it('Σ mask·x / denominator over the global batch size is the mean of the live prompts’ token means', () => {
    fc.assert(
      fc.property(batchArbitrary, (batch) => {
        const { samples, values } = build(batch);
        const train = convertSamplesToTrainData(samples, { globalBatchSize: batch.globalBatchSize });
        let reduced = 0;
        const perPrompt = new Map<string, { sum: number; count: number }>();
        samples.forEach((sample, i) => {
          const mask = train.loss_masks[i] as number[];
          const x = values[i] as number[];
          let masked = 0;
          let count = 0;
          mask.forEach((m, t) => {
            masked += m * (x[t] as number);
            count += m;
          });
          const denominator = train.rollout_mask_sums[i] as number;
          // A zero denominator only ever meets an all-zero mask; such a sample contributes nothing.
          if (denominator === 0) expect(count).toBe(0);
          else reduced += masked / denominator;
          if (!sample.remove_sample) {
            const prompt = perPrompt.get(sample.metadata.instance_id as string) ?? { sum: 0, count: 0 };
            prompt.sum += masked;
            prompt.count += count;
            perPrompt.set(sample.metadata.instance_id as string, prompt);
          }
        });
        const means = [...perPrompt.values()].filter((p) => p.count > 0).map((p) => p.sum / p.count);
        const expected = means.length === 0 ? 0 : means.reduce((a, b) => a + b, 0) / means.length;
        expectClose(reduced / batch.globalBatchSize, expected);
      }),
      { seed: SEED, numRuns: 400 },
    );
  });

  it('gives every live prompt the same total weight, whatever its segment count', () => {
    fc.assert(
      fc.property(batchArbitrary, (batch) => {
        const { samples } = build(batch);
        const train = convertSamplesToTrainData(samples, { globalBatchSize: batch.globalBatchSize });
        // With x = 1 on every token, a prompt's share of the reduced loss is its weight.
        const weights = new Map<string, number>();
        samples.forEach((sample, i) => {
          const tokens = (train.loss_masks[i] as number[]).reduce((a, b) => a + b, 0);
          if (tokens === 0) return;
          const prompt = sample.metadata.instance_id as string;
          const share = tokens / (train.rollout_mask_sums[i] as number) / batch.globalBatchSize;
          weights.set(prompt, (weights.get(prompt) ?? 0) + share);
        });
        for (const weight of weights.values()) expectClose(weight, 1 / weights.size);
      }),
      { seed: SEED + 1, numRuns: 300 },
    );
  });

  it('needs the exact denominators: clamping them at 1 (slime’s reducer) breaks the property', () => {
    const sample = (prompt: string, mask: (0 | 1)[]) =>
      createSample({
        index: prompt === 'p1' ? 0 : 1,
        group_index: 0,
        tokens: [1, ...mask],
        response_length: mask.length,
        loss_mask: mask,
        metadata: { parent_traj_id: prompt, instance_id: prompt },
      });
    const samples = [sample('p1', [1]), sample('p2', [1, 1])];
    const train = convertSamplesToTrainData(samples, { globalBatchSize: 8 });
    expect(train.rollout_mask_sums).toEqual([0.25, 0.5]);
    // x = 1 on every token: the mean of the prompts' token means is 1.
    const exact = (1 / 0.25 + 2 / 0.5) / 8;
    const clamped = (1 / Math.max(0.25, 1) + 2 / Math.max(0.5, 1)) / 8;
    expect(exact).toBe(1);
    expect(clamped).toBe(0.375);
  });
});

describe('reward post-processing (property)', () => {
  const estimators = ['grpo', 'gspo', 'reinforce_plus_plus_baseline', 'ppo', 'reinforce_plus_plus'] as const;

  it('gives all live segments of a trajectory the same reward', () => {
    fc.assert(
      fc.property(
        batchArbitrary,
        fc.constantFrom(...estimators),
        fc.boolean(),
        (batch, estimator, normalize) => {
          const { samples } = build(batch);
          const { rewards } = rewardPostProcess(samples, {
            advantageEstimator: estimator,
            standardDeviationNormalization: normalize,
          });
          const byTrajectory = new Map<string, number>();
          samples.forEach((sample, i) => {
            if (sample.remove_sample) return;
            const id = sample.metadata.parent_traj_id as string;
            const seen = byTrajectory.get(id);
            if (seen === undefined) byTrajectory.set(id, rewards[i] as number);
            else expect(rewards[i]).toBe(seen);
          });
        },
      ),
      { seed: SEED + 2, numRuns: 300 },
    );
  });

  it('centres each group’s anchors on 0 and scales them to std 1 when the raw std exceeds 1e-6', () => {
    fc.assert(
      fc.property(batchArbitrary, (batch) => {
        const { samples } = build(batch);
        const { rawRewards, rewards } = rewardPostProcess(samples);
        // One anchor per live trajectory: the live segment with the highest segment_index.
        const anchors = new Map<string, number>();
        samples.forEach((sample, i) => {
          if (sample.remove_sample) return;
          const id = sample.metadata.parent_traj_id as string;
          const current = anchors.get(id);
          if (
            current === undefined ||
            (sample.metadata.segment_index as number) >= (samples[current]?.metadata.segment_index as number)
          ) {
            anchors.set(id, i);
          }
        });
        const groups = new Map<number, number[]>();
        for (const position of anchors.values()) {
          const group = samples[position]?.group_index as number;
          groups.set(group, [...(groups.get(group) ?? []), position]);
        }
        for (const members of groups.values()) {
          const raw = members.map((position) => rawRewards[position] as number);
          const normalized = members.map((position) => rewards[position] as number);
          const rawMean = raw.reduce((a, b) => a + b, 0) / raw.length;
          const rawStd = Math.sqrt(raw.reduce((a, b) => a + (b - rawMean) ** 2, 0) / raw.length);
          const mean = normalized.reduce((a, b) => a + b, 0) / normalized.length;
          const std = Math.sqrt(normalized.reduce((a, b) => a + (b - mean) ** 2, 0) / normalized.length);
          expect(Math.abs(mean)).toBeLessThan(1e-9);
          if (rawStd > STANDARD_DEVIATION_EPSILON) expect(Math.abs(std - 1)).toBeLessThan(1e-9);
          else expect(std).toBeCloseTo(rawStd, 12);
        }
      }),
      { seed: SEED + 3, numRuns: 300 },
    );
  });
});
