import { createSample, DressageError, type Sample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { rewardPostProcess } from './reward-post-process.js';
import { trainingDefaults } from './training-options.js';

function segment(
  trajectory: string | null,
  segmentIndex: number,
  reward: Sample['reward'],
  fields: Parameters<typeof createSample>[0] = {},
): Sample {
  return createSample({
    group_index: 0,
    reward,
    ...fields,
    metadata: trajectory === null ? {} : { parent_traj_id: trajectory, segment_index: segmentIndex },
  });
}

function close(actual: number[], expected: number[]): void {
  expect(actual).toHaveLength(expected.length);
  actual.forEach((value, i) => {
    expect(value).toBeCloseTo(expected[i] as number, 12);
  });
}

describe('rewardPostProcess', () => {
  it('worked example: a 3-segment and a 1-segment trajectory', () => {
    const samples = [segment('t1', 0, 0), segment('t1', 1, 0), segment('t1', 2, 2), segment('t2', 0, 4)];
    const { rawRewards, rewards } = rewardPostProcess(samples);
    expect(rawRewards).toEqual([0, 0, 2, 4]);
    // Population std of {2, 4} is 1; the unbiased estimator would give ±0.707.
    close(rewards, [-1, -1, -1, 1]);
  });

  it('worked example: two groups without std normalisation', () => {
    const samples = [
      segment(null, 0, 0),
      segment(null, 0, 2),
      segment('c', 0, 0, { group_index: 1 }),
      segment('c', 1, 5, { group_index: 1 }),
      segment('d', 0, 0, { group_index: 1 }),
      segment('d', 1, 1, { group_index: 1 }),
    ];
    close(
      rewardPostProcess(samples, { standardDeviationNormalization: false }).rewards,
      [-1, 1, 2, 2, -2, -2],
    );
    // REINFORCE++-baseline centres but never divides.
    close(
      rewardPostProcess(samples, { advantageEstimator: 'reinforce_plus_plus_baseline' }).rewards,
      [-1, 1, 2, 2, -2, -2],
    );
    // GRPO's default divides group 1 by its std of 2.
    close(rewardPostProcess(samples).rewards, [-1, 1, 1, 1, -1, -1]);
    close(rewardPostProcess(samples, { advantageEstimator: 'gspo' }).rewards, [-1, 1, 1, 1, -1, -1]);
  });

  it('defaults to GRPO with std normalisation, stated once', () => {
    expect(trainingDefaults).toMatchObject({
      advantageEstimator: 'grpo',
      rewardsNormalization: true,
      standardDeviationNormalization: true,
    });
  });

  it('does not divide when the std is at most 1e-6', () => {
    close(rewardPostProcess([segment(null, 0, 3), segment(null, 0, 3)]).rewards, [0, 0]);
    close(rewardPostProcess([segment(null, 0, 1), segment(null, 0, 1 + 1e-7)]).rewards, [-5e-8, 5e-8]);
    close(rewardPostProcess([segment(null, 0, 5)]).rewards, [0]);
  });

  it('keeps raw values on removed samples and leaves them out of the group statistics', () => {
    const samples = [
      segment(null, 0, 1),
      segment(null, 0, 3),
      segment(null, 0, 100, { remove_sample: true }),
    ];
    const { rawRewards, rewards } = rewardPostProcess(samples);
    expect(rawRewards).toEqual([1, 3, 100]);
    close(rewards, [-1, 1, 100]);
  });

  it('anchors on the highest live segment; ties go to the later sample', () => {
    const removedTop = [
      segment('t', 0, 0),
      segment('t', 1, 1),
      segment('t', 2, 9, { remove_sample: true }),
      segment('u', 0, 3),
    ];
    close(rewardPostProcess(removedTop).rewards, [-1, -1, 9, 1]);
    const tie = [segment('t', 1, 5), segment('t', 1, 1), segment('u', 0, 3)];
    close(rewardPostProcess(tie).rewards, [-1, -1, 1]);
  });

  it('broadcasts raw anchor rewards when no normalisation applies', () => {
    const samples = [segment('t', 0, 0), segment('t', 1, 2), segment('u', 0, 5), segment(null, 0, 7)];
    for (const options of [
      { advantageEstimator: 'ppo' as const },
      { advantageEstimator: 'reinforce_plus_plus' as const },
      { advantageEstimator: 'cispo' as const },
      { rewardsNormalization: false },
    ]) {
      const { rawRewards, rewards } = rewardPostProcess(samples, options);
      expect(rawRewards).toEqual([0, 2, 5, 7]);
      expect(rewards).toEqual([2, 2, 5, 7]);
    }
  });

  it('groups samples without group_index together and reads rewards through the key', () => {
    const samples = [
      segment(null, 0, { score: 1 }, { group_index: null }),
      segment(null, 0, { score: 3 }, { group_index: null }),
      segment(null, 0, null, { group_index: 4 }),
    ];
    const { rawRewards, rewards } = rewardPostProcess(samples, { rewardKey: 'score' });
    expect(rawRewards).toEqual([1, 3, 0]);
    close(rewards, [-1, 1, 0]);
  });

  it('rejects an object reward without the configured key, naming the key and the sample', () => {
    // A typo in the key must not read every reward as 0 (no signal, silently).
    const samples = [
      segment('t1', 0, { score: 1 }, { index: 3 }),
      segment('t2', 0, { score: 0 }, { index: 4 }),
    ];
    try {
      rewardPostProcess(samples, { rewardKey: 'scroe' });
      expect.unreachable();
    } catch (error) {
      expect(DressageError.isInstance(error)).toBe(true);
      expect((error as DressageError).code).toBe('invalid_argument');
      expect((error as DressageError).message).toContain('"scroe"');
      expect((error as DressageError).message).toContain('index 3');
      expect((error as DressageError).message).toContain('session t1');
    }
  });

  it('rejects an unknown estimator', () => {
    try {
      rewardPostProcess([], { advantageEstimator: 'a2c' as never });
      expect.unreachable();
    } catch (error) {
      expect(DressageError.isInstance(error)).toBe(true);
      expect((error as DressageError).message).toContain('Unknown advantage estimator "a2c"');
    }
  });
});
