import type { Sample } from '@dressage/protocol';

/** The fields the anchor rule reads. */
export type AnchorSample = Pick<Sample, 'metadata' | 'remove_sample'>;

/** The trajectory a segment belongs to (`metadata.parent_traj_id`), or null for a stand-alone sample. */
export function trajectoryIdOf(sample: Pick<Sample, 'metadata'>): string | null {
  const id = sample.metadata.parent_traj_id;
  return typeof id === 'string' && id !== '' ? id : null;
}

/** A segment's position within its trajectory (`metadata.segment_index`, 0 when absent). */
export function segmentIndexOf(sample: Pick<Sample, 'metadata'>): number {
  const index = sample.metadata.segment_index;
  return typeof index === 'number' && Number.isFinite(index) ? index : 0;
}

/** True for a sample that takes part in training (`remove_sample` is false). */
export function isLiveSample(sample: Pick<Sample, 'remove_sample'>): boolean {
  return !sample.remove_sample;
}

/**
 * The anchor of every trajectory: among the samples `include` accepts (default: live ones) that carry
 * a `parent_traj_id`, the one with the highest `segment_index`; on a tie, the later one in input order.
 * This is the one anchor rule used by reward post-processing, logging and staleness.
 *
 * @returns trajectory id → position of its anchor in `samples`
 */
export function findTrajectoryAnchors<T extends AnchorSample>(
  samples: readonly T[],
  include: (sample: T) => boolean = isLiveSample,
): Map<string, number> {
  const anchors = new Map<string, number>();
  const best = new Map<string, number>();
  for (let position = 0; position < samples.length; position++) {
    // In bounds: the loop runs over the array's own length.
    const sample = samples[position] as T;
    if (!include(sample)) continue;
    const id = trajectoryIdOf(sample);
    if (id === null) continue;
    const index = segmentIndexOf(sample);
    const current = best.get(id);
    if (current === undefined || index >= current) {
      best.set(id, index);
      anchors.set(id, position);
    }
  }
  return anchors;
}
