import { computeMultiSegmentMetrics } from '@dressage/multi-segment';
import { createSample, type Sample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { StalenessTracker, trajectoryAnchors, trajectoryVersions } from './staleness.js';

function segment(
  parent: string | null,
  index: number | undefined,
  version: string,
  extra: Partial<Sample> = {},
) {
  const metadata: Record<string, unknown> = { dressage_end_token_version: version, full_versions: [version] };
  if (parent !== null) metadata.parent_traj_id = parent;
  if (index !== undefined) metadata.segment_index = index;
  return createSample({ metadata, ...extra });
}

describe('trajectory anchors', () => {
  it('picks the live segment with the highest segment_index, the later one on a tie', () => {
    const samples = [
      segment('t1', 0, '1'),
      segment('t1', 2, '3'),
      segment('t1', 1, '2'),
      segment('t2', 0, '5'),
      segment('t2', 0, '6'),
      segment('t3', 4, '9', { remove_sample: true }),
      segment('t3', 1, '8'),
    ];
    const anchors = trajectoryAnchors(samples);
    expect(anchors.get('t1')).toBe(samples[1]);
    expect(anchors.get('t2')).toBe(samples[4]);
    expect(anchors.get('t3')).toBe(samples[6]);
    expect(trajectoryVersions(samples)).toEqual([
      { parentTrajId: 't1', version: '3' },
      { parentTrajId: 't2', version: '6' },
      { parentTrajId: 't3', version: '8' },
    ]);
  });

  it('ignores samples without a parent id or a real version', () => {
    expect(
      trajectoryVersions([segment(null, 0, '4'), segment('t', 0, 'unknown'), segment('u', 0, '-1')]),
    ).toEqual([]);
  });
});

describe('StalenessTracker', () => {
  it('keeps the newest N versions in observation order, labels being opaque', () => {
    const tracker = new StalenessTracker(2);
    expect(tracker.observe([segment('a', 0, 'zeta')])).toBe(true);
    expect(tracker.observe([segment('b', 0, 'alpha')])).toBe(true);
    expect(tracker.observe([segment('c', 0, 'alpha')])).toBe(false);
    expect(tracker.isStale([segment('d', 0, 'zeta')])).toBe(false);
    tracker.observe([segment('e', 0, 'mid')]);
    expect(tracker.versions).toEqual(['zeta', 'alpha', 'mid']);
    expect(tracker.cutoffIndex).toBe(1);
    expect(tracker.isStale([segment('d', 0, 'zeta')])).toBe(true);
    // One stale trajectory drops the whole group.
    expect(tracker.isStale([segment('f', 0, 'mid'), segment('g', 0, 'zeta')])).toBe(true);
    expect(tracker.isStale([segment(null, 0, 'zeta')])).toBe(false);
    expect(tracker.gaps([segment('h', 0, 'alpha'), segment('i', 0, 'mid')])).toEqual([1, 0]);
    expect(tracker.metrics([[segment('h', 0, 'alpha'), segment('i', 0, 'mid')]], 3)).toEqual({
      'staleness/dropped_groups': 3,
      'staleness/current_version_index': 2,
      'staleness/cutoff_version_index': 1,
      'staleness/version_gap_min': 0,
      'staleness/version_gap_max': 1,
      'staleness/version_gap_mean': 0.5,
    });
  });

  it('is off with 0 or null and rejects negative values', () => {
    for (const keep of [0, null]) {
      const tracker = new StalenessTracker(keep);
      expect(tracker.observe([segment('a', 0, '1')])).toBe(false);
      expect(tracker.observe([segment('b', 0, '2')])).toBe(false);
      expect(tracker.observeVersion('3')).toBe(false);
      // No version is tracked: the filter is a no-op, not a tracker that never drops.
      expect(tracker.versions).toEqual([]);
      expect(tracker.gaps([segment('a', 0, '1')])).toEqual([]);
      expect(tracker.isStale([segment('a', 0, '1')])).toBe(false);
      // Off means off: no staleness/* metric, as the reference.
      expect(tracker.metrics([[segment('a', 0, '1')]], 0)).toEqual({});
    }
    expect(() => new StalenessTracker(-1)).toThrow(/non-negative/);
  });
});

describe('StalenessTracker.observeVersion', () => {
  it('adds a version no rollout ended on yet, ignoring placeholders and repeats', () => {
    const tracker = new StalenessTracker(2);
    tracker.observe([segment('a', 0, '1')]);
    expect(tracker.observeVersion('2')).toBe(true);
    expect(tracker.observeVersion('2')).toBe(false);
    expect(tracker.observeVersion('unknown')).toBe(false);
    expect(tracker.observeVersion('3')).toBe(true);
    expect(tracker.gaps([segment('a', 0, '1')])).toEqual([2]);
    expect(tracker.isStale([segment('a', 0, '1')])).toBe(true);
    expect(tracker.isStale([segment('b', 0, '2')])).toBe(false);
  });
});

describe('computeMultiSegmentMetrics', () => {
  it('counts live segments of parent trajectories and version spans', () => {
    const samples = [
      createSample({ metadata: { parent_traj_id: 't1', full_versions: ['1', '1', '2', '-1'] } }),
      createSample({ metadata: { parent_traj_id: 't1', full_versions: ['3'] } }),
      createSample({ metadata: { parent_traj_id: 't2', full_versions: ['3'] } }),
      createSample({ metadata: {} }),
      createSample({ metadata: { parent_traj_id: 't3' }, remove_sample: true }),
    ];
    expect(computeMultiSegmentMetrics(samples)).toEqual({
      'rollout/num_trajectories': 2,
      'rollout/num_segments': 3,
      'rollout/segments_per_trajectory_mean': 1.5,
      'rollout/segments_per_trajectory_max': 2,
      'rollout/segments_per_trajectory_min': 1,
      'staleness/version_span_mean': 2,
      'staleness/version_span_max': 3,
      'staleness/version_span_min': 1,
    });
  });
});
