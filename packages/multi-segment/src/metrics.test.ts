import { createSample, type Sample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { computeMultiSegmentMetrics, rawRewardTrajectoryMean, rolloutLogMetrics } from './metrics.js';

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
  it('counts live segments per trajectory', () => {
    const samples = [
      part('a', 0),
      part('a', 1),
      part('a', 2),
      part('b', 0),
      part(null, 0),
      part('c', 0, { remove_sample: true }),
    ];
    expect(computeMultiSegmentMetrics(samples)).toEqual({
      'rollout/num_segments': 5,
      'rollout/num_trajectories': 3,
      'rollout/segments_per_trajectory_mean': 5 / 3,
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

  it('reports zero counts for an empty batch', () => {
    expect(computeMultiSegmentMetrics([])).toEqual({
      'rollout/num_segments': 0,
      'rollout/num_trajectories': 0,
    });
  });
});

describe('rawRewardTrajectoryMean', () => {
  it('averages the anchors’ raw rewards over trajectories', () => {
    const samples = [
      part('a', 0, { reward: 0 }),
      part('a', 1, { reward: 1 }),
      part('b', 0, { reward: 0.5 }),
      part(null, 0, { reward: 0.3 }),
    ];
    expect(rawRewardTrajectoryMean(samples)).toBeCloseTo((1 + 0.5 + 0.3) / 3);
  });

  it('only counts samples with trainable loss, choosing the anchor among them', () => {
    const samples = [
      part('a', 0, { reward: 0.25 }),
      // Highest index but nothing to train: not the anchor.
      part('a', 1, { reward: 1, loss_mask: [0] }),
      part('b', 0, { reward: 1, remove_sample: true }),
      part('c', 0, { reward: { score: 0.75 } }),
    ];
    expect(rawRewardTrajectoryMean(samples, { rewardKey: 'score' })).toBeCloseTo((0.25 + 0.75) / 2);
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
