import { distinctRealVersions, type Sample } from '@dressage/protocol';

function summary(prefix: string, values: readonly number[], out: Record<string, number>): void {
  if (values.length === 0) return;
  out[`${prefix}_mean`] = values.reduce((sum, value) => sum + value, 0) / values.length;
  out[`${prefix}_max`] = Math.max(...values);
  out[`${prefix}_min`] = Math.min(...values);
}

/**
 * Multi-segment metrics of a batch, over live samples only: `rollout/num_trajectories`,
 * `rollout/num_segments`, `rollout/segments_per_trajectory_{mean,max,min}`, and
 * `staleness/version_span_{mean,max,min}` (distinct real versions in a trajectory's `full_versions`).
 * A live sample without `parent_traj_id` counts as a trajectory of its own.
 */
export function computeMultiSegmentMetrics(samples: readonly Sample[]): Record<string, number> {
  const segments = new Map<string, Sample[]>();
  let orphan = 0;
  for (const sample of samples) {
    if (sample.remove_sample) continue;
    const parent = sample.metadata.parent_traj_id;
    const key = typeof parent === 'string' && parent !== '' ? `t:${parent}` : `o:${orphan++}`;
    const list = segments.get(key);
    if (list === undefined) segments.set(key, [sample]);
    else list.push(sample);
  }
  const metrics: Record<string, number> = {
    'rollout/num_trajectories': segments.size,
    'rollout/num_segments': [...segments.values()].reduce((sum, list) => sum + list.length, 0),
  };
  summary(
    'rollout/segments_per_trajectory',
    [...segments.values()].map((list) => list.length),
    metrics,
  );
  const spans: number[] = [];
  for (const list of segments.values()) {
    const versions = list.flatMap((sample) => {
      const full = sample.metadata.full_versions;
      return Array.isArray(full) ? full.filter((value): value is string => typeof value === 'string') : [];
    });
    if (versions.length > 0) spans.push(distinctRealVersions(versions).length);
  }
  summary('staleness/version_span', spans, metrics);
  return metrics;
}
