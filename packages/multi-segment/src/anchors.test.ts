import { createSample, type Sample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { findTrajectoryAnchors, segmentIndexOf, trajectoryIdOf } from './anchors.js';

function part(parent: string | null, segmentIndex: number | undefined, removed = false): Sample {
  const metadata: Record<string, unknown> = {};
  if (parent !== null) metadata.parent_traj_id = parent;
  if (segmentIndex !== undefined) metadata.segment_index = segmentIndex;
  return createSample({ metadata, remove_sample: removed });
}

describe('anchors', () => {
  it('picks the highest segment index per trajectory', () => {
    const samples = [part('a', 0), part('a', 2), part('b', 0), part('a', 1)];
    expect(findTrajectoryAnchors(samples)).toEqual(
      new Map([
        ['a', 1],
        ['b', 2],
      ]),
    );
  });

  it('breaks ties by the later sample in input order', () => {
    expect(findTrajectoryAnchors([part('a', 1), part('a', 1), part('a', 0)]).get('a')).toBe(1);
  });

  it('ignores removed samples and samples without a trajectory', () => {
    const samples = [part('a', 0), part('a', 3, true), part(null, 5)];
    expect(findTrajectoryAnchors(samples)).toEqual(new Map([['a', 0]]));
    expect(findTrajectoryAnchors(samples, () => true).get('a')).toBe(1);
  });

  it('reads missing segment indexes as 0 and empty ids as none', () => {
    expect(segmentIndexOf(part('a', undefined))).toBe(0);
    expect(trajectoryIdOf(part('', 0))).toBeNull();
  });
});
