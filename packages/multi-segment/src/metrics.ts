import { distinctRealVersions, type Sample } from '@dressage/protocol';
import { readRewardValue } from '@dressage/reward-registry';
import { findTrajectoryAnchors, isLiveSample, trajectoryIdOf } from './anchors.js';

type MetricSample = Pick<Sample, 'metadata' | 'remove_sample'>;

function summary(prefix: string, values: readonly number[]): Record<string, number> {
  let total = 0;
  let max = Number.NEGATIVE_INFINITY;
  let min = Number.POSITIVE_INFINITY;
  for (const value of values) {
    total += value;
    if (value > max) max = value;
    if (value < min) min = value;
  }
  return { [`${prefix}_mean`]: total / values.length, [`${prefix}_max`]: max, [`${prefix}_min`]: min };
}

/**
 * Segment and version statistics over the live samples (removed ones are ignored):
 * `rollout/num_segments`, `rollout/num_trajectories`, `rollout/segments_per_trajectory_{mean,max,min}`
 * and, when samples carry `metadata.full_versions`, `staleness/version_span_{mean,max,min}` (distinct
 * real weight versions per trajectory). A sample without `parent_traj_id` is a trajectory of its own.
 */
export function computeMultiSegmentMetrics(samples: readonly MetricSample[]): Record<string, number> {
  const segmentCounts = new Map<string | number, number>();
  const versionsByTrajectory = new Map<string | number, string[]>();
  let live = 0;
  for (let position = 0; position < samples.length; position++) {
    const sample = samples[position] as MetricSample;
    if (!isLiveSample(sample)) continue;
    live += 1;
    const key = trajectoryIdOf(sample) ?? position;
    segmentCounts.set(key, (segmentCounts.get(key) ?? 0) + 1);
    const versions = sample.metadata.full_versions;
    if (Array.isArray(versions)) {
      const list = versionsByTrajectory.get(key) ?? [];
      for (const version of distinctRealVersions(versions as string[])) list.push(version);
      versionsByTrajectory.set(key, list);
    }
  }
  const metrics: Record<string, number> = {
    'rollout/num_segments': live,
    'rollout/num_trajectories': segmentCounts.size,
  };
  if (segmentCounts.size > 0)
    Object.assign(metrics, summary('rollout/segments_per_trajectory', [...segmentCounts.values()]));
  if (versionsByTrajectory.size > 0) {
    const spans = [...versionsByTrajectory.values()].map((versions) => new Set(versions).size);
    Object.assign(metrics, summary('staleness/version_span', spans));
  }
  return metrics;
}

function hasTrainableLoss(sample: Pick<Sample, 'remove_sample' | 'loss_mask' | 'response_length'>): boolean {
  if (sample.remove_sample) return false;
  if (sample.loss_mask === null) return sample.response_length > 0;
  return sample.loss_mask.includes(1);
}

/**
 * `rollout/raw_reward_trajectory_mean`: the mean over trajectories of the anchor's raw reward, where
 * only samples with trainable loss take part and the anchor is chosen by the shared anchor rule.
 * Undefined when no sample carries a `parent_traj_id` (single-segment runs log slime's own mean) or
 * no trajectory has trainable loss.
 */
export function rawRewardTrajectoryMean(
  samples: readonly Sample[],
  options: { rewardKey?: string | null } = {},
): number | undefined {
  if (!samples.some((sample) => trajectoryIdOf(sample) !== null)) return undefined;
  const anchors = findTrajectoryAnchors(samples, hasTrainableLoss);
  let total = 0;
  let count = 0;
  for (let position = 0; position < samples.length; position++) {
    const sample = samples[position] as Sample;
    if (!hasTrainableLoss(sample)) continue;
    const id = trajectoryIdOf(sample);
    // Stand-alone samples are trajectories of their own; segments count once, through their anchor.
    if (id !== null && anchors.get(id) !== position) continue;
    total += readRewardValue(sample.reward, options.rewardKey);
    count += 1;
  }
  return count === 0 ? undefined : total / count;
}

/**
 * The rollout metrics Dressage adds to slime's log: {@link computeMultiSegmentMetrics} plus
 * `rollout/raw_reward_trajectory_mean` when defined.
 */
export function rolloutLogMetrics(
  samples: readonly Sample[],
  options: { rewardKey?: string | null } = {},
): Record<string, number> {
  const metrics = computeMultiSegmentMetrics(samples);
  const mean = rawRewardTrajectoryMean(samples, options);
  if (mean !== undefined) metrics['rollout/raw_reward_trajectory_mean'] = mean;
  return metrics;
}
