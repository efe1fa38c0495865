import { createSample, type Sample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import {
  computeMultiSegmentMetrics,
  mopdTeacherMetrics,
  rawRewardTrajectoryMean,
  rolloutLogMetrics,
} from './metrics.js';

function part(
  parent: string | null,
  segmentIndex: number,
  fields: Parameters<typeof createSample>[0] = {},
  metadata: Record<string, unknown> = {},
): Sample {
  return createSample({
    tokens: [1, 2],
    response_length: 1,
    loss_mask: [1],
    ...fields,
    metadata: {
      ...(parent === null ? {} : { parent_traj_id: parent }),
      segment_index: segmentIndex,
      ...metadata,
    },
  });
}

describe('computeMultiSegmentMetrics', () => {
  it('counts the live segments of trajectories with a parent id', () => {
    const samples = [
      part('a', 0),
      part('a', 1),
      part('a', 2),
      part('b', 0),
      // No parent: not a segment of any trajectory (as in the reference).
      part(null, 0),
      part('c', 0, { remove_sample: true }),
    ];
    expect(computeMultiSegmentMetrics(samples)).toEqual({
      'rollout/num_segments': 4,
      'rollout/num_trajectories': 2,
      'rollout/segments_per_trajectory_mean': 2,
      'rollout/segments_per_trajectory_max': 3,
      'rollout/segments_per_trajectory_min': 1,
    });
  });

  it('measures distinct real versions per trajectory', () => {
    const samples = [
      part('a', 0, {}, { full_versions: ['-1', '1', '1'] }),
      part('a', 1, {}, { full_versions: ['-1', '2', 'unknown'] }),
      part('b', 0, {}, { full_versions: ['-1', '2'] }),
    ];
    expect(computeMultiSegmentMetrics(samples)).toMatchObject({
      'staleness/version_span_mean': 1.5,
      'staleness/version_span_max': 2,
      'staleness/version_span_min': 1,
    });
  });

  it('counts versions of samples without a parent under their session, rollout or index', () => {
    const samples = [
      part(null, 0, {}, { session_id: 's', full_versions: ['1'] }),
      part(null, 0, {}, { session_id: 's', full_versions: ['2', ' 2 '] }),
      part(null, 0, { rollout_id: 4 }, { full_versions: [3, null, 'none'] }),
      part(null, 0, { index: 9 }, { full_versions: ['-1', 'unknown'] }),
    ];
    expect(computeMultiSegmentMetrics(samples)).toEqual({
      'staleness/version_span_mean': 1.5,
      'staleness/version_span_max': 2,
      'staleness/version_span_min': 1,
    });
  });

  it('has no metrics for an empty batch or one without segments', () => {
    expect(computeMultiSegmentMetrics([])).toEqual({});
    expect(computeMultiSegmentMetrics([part(null, 0), part('a', 0, { remove_sample: true })])).toEqual({});
    expect(rolloutLogMetrics([])).toEqual({});
  });
});

describe('rawRewardTrajectoryMean', () => {
  it('averages the anchors’ raw rewards over trajectories with a parent id', () => {
    const samples = [
      part('a', 0, { reward: 0 }),
      part('a', 1, { reward: 1 }),
      part('b', 0, { reward: 0.5 }),
      // Without a parent id a sample is not counted (the reference's rule).
      part(null, 0, { reward: 0.3 }),
    ];
    expect(rawRewardTrajectoryMean(samples)).toBeCloseTo((1 + 0.5) / 2);
  });

  it('only counts samples with trainable loss, choosing the anchor among them', () => {
    const samples = [
      part('a', 0, { reward: 0.25 }),
      // Highest index but nothing to train: not the anchor.
      part('a', 1, { reward: 1, loss_mask: [0] }),
      part('b', 0, { reward: 1, remove_sample: true }),
      part('c', 0, { reward: { score: 0.75 } }),
      // No response tokens: nothing to train.
      part('d', 0, { reward: 1, response_length: 0, loss_mask: [] }),
    ];
    expect(rawRewardTrajectoryMean(samples, { rewardKey: 'score' })).toBeCloseTo((0.25 + 0.75) / 2);
    expect(() => rawRewardTrajectoryMean(samples, { rewardKey: 'acc' })).toThrow(/"acc"/);
  });

  it('is undefined without trajectories or trainable samples', () => {
    expect(rawRewardTrajectoryMean([part(null, 0, { reward: 1 })])).toBeUndefined();
    expect(rawRewardTrajectoryMean([part('a', 0, { reward: 1, remove_sample: true })])).toBeUndefined();
  });

  it('joins both in rolloutLogMetrics', () => {
    const metrics = rolloutLogMetrics([part('a', 0, { reward: 0 }), part('a', 1, { reward: 1 })]);
    expect(metrics['rollout/raw_reward_trajectory_mean']).toBe(1);
    expect(metrics['rollout/num_trajectories']).toBe(1);
    expect(rolloutLogMetrics([part(null, 0)])).not.toHaveProperty('rollout/raw_reward_trajectory_mean');
  });
});

describe('mopdTeacherMetrics', () => {
  it('averages each teacher’s trajectories, one anchor each', () => {
    const samples = [
      part('a', 0, { reward: 0 }, { teacher_id: 'math' }),
      part('a', 1, { reward: 1 }, { teacher_id: 'math' }),
      part('b', 0, { reward: 0 }, { teacher_id: ' math ' }),
      // No parent: the session is the trajectory.
      part(null, 0, { reward: 0.5, session_id: 's1' }, { teacher_id: 'code/v2 large' }),
      part(null, 0, { reward: 1, session_id: 's1' }, { teacher_id: 'code/v2 large', segment_index: 1 }),
      part('c', 0, { reward: 1, remove_sample: true }, { teacher_id: 'math' }),
      part('d', 0, { reward: 1, loss_mask: [0] }, { teacher_id: 'math' }),
      part('e', 0, { reward: 1 }),
    ];
    expect(mopdTeacherMetrics(samples)).toEqual({
      'rollout/mopd/raw_reward_trainable_trajectory_mean/math': 0.5,
      'rollout/mopd/raw_reward_trainable_trajectory_mean/code_v2_large': 1,
    });
    expect(rolloutLogMetrics(samples)).toMatchObject({
      'rollout/mopd/raw_reward_trainable_trajectory_mean/math': 0.5,
      'rollout/raw_reward_trajectory_mean': (1 + 0 + 1) / 3,
    });
  });

  it('names a teacher with no usable character "unnamed"', () => {
    expect(mopdTeacherMetrics([part('a', 0, { reward: 1 }, { teacher_id: ' // ' })])).toEqual({
      'rollout/mopd/raw_reward_trainable_trajectory_mean/unnamed': 1,
    });
    expect(mopdTeacherMetrics([part('a', 0, { reward: 1 })])).toEqual({});
  });
});
