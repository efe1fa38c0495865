import type { Sample } from '@dressage/protocol';
import { describeSample, readRewardValue } from '@dressage/reward-registry';
import { isLiveSample, segmentIndexOf, trajectoryIdOf } from './anchors.js';

type MetricSample = Pick<Sample, 'metadata' | 'remove_sample' | 'rollout_id' | 'index'>;

/** Options of the reward metrics. */
export interface RolloutMetricOptions {
  /** Key read from object-valued rewards (slime's `--reward-key`). */
  rewardKey?: string | null;
}

const nonRealVersionLabels = new Set(['', '-1', 'none', 'unknown']);

// A version label as the reference reads it for metrics: stringified and trimmed; placeholders and
// null are no version at all.
function realVersionLabel(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  const label = String(value).trim();
  return nonRealVersionLabels.has(label.toLowerCase()) ? null : label;
}

function truthy(value: unknown): boolean {
  return value !== null && value !== undefined && value !== '' && value !== 0 && value !== false;
}

// The trajectory a sample's versions count towards: its parent or session, else its rollout, else
// the sample itself; null when it has none of them.
function versionTrajectoryKey(sample: MetricSample): string | null {
  const metadata = sample.metadata;
  const id = truthy(metadata.parent_traj_id) ? metadata.parent_traj_id : metadata.session_id;
  if (id !== null && id !== undefined) return String(id);
  if (sample.rollout_id !== null && sample.rollout_id !== undefined) return `rollout:${sample.rollout_id}`;
  if (sample.index !== null && sample.index !== undefined) return `sample:${sample.index}`;
  return null;
}

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
 * `rollout/num_segments`, `rollout/num_trajectories` and `rollout/segments_per_trajectory_{mean,max,min}`
 * over the samples that carry a `parent_traj_id`, and, when samples carry `metadata.full_versions`,
 * `staleness/version_span_{mean,max,min}` (distinct real weight versions per trajectory; a sample
 * without a parent counts under its session, rollout id or index). A batch with no segment and no
 * versions (an empty one among them) has no metrics: `{}`.
 */
export function computeMultiSegmentMetrics(samples: readonly MetricSample[]): Record<string, number> {
  const segmentCounts = new Map<string, number>();
  const versionsByTrajectory = new Map<string, Set<string>>();
  for (const sample of samples) {
    if (!isLiveSample(sample)) continue;
    const id = trajectoryIdOf(sample);
    if (id !== null) segmentCounts.set(id, (segmentCounts.get(id) ?? 0) + 1);
    const versions = sample.metadata.full_versions;
    const key = versionTrajectoryKey(sample);
    if (key === null || !Array.isArray(versions)) continue;
    let seen = versionsByTrajectory.get(key);
    if (seen === undefined) {
      seen = new Set();
      versionsByTrajectory.set(key, seen);
    }
    for (const value of versions) {
      const version = realVersionLabel(value);
      if (version !== null) seen.add(version);
    }
  }
  const metrics: Record<string, number> = {};
  if (segmentCounts.size > 0) {
    const counts = [...segmentCounts.values()];
    Object.assign(metrics, summary('rollout/segments_per_trajectory', counts));
    metrics['rollout/num_trajectories'] = counts.length;
    metrics['rollout/num_segments'] = counts.reduce((total, count) => total + count, 0);
  }
  const spans = [...versionsByTrajectory.values()]
    .map((versions) => versions.size)
    .filter((size) => size > 0);
  if (spans.length > 0) Object.assign(metrics, summary('staleness/version_span', spans));
  return metrics;
}

/** True for a sample whose loss reaches the weights: live, with response tokens and a trainable one. */
function hasTrainableLoss(sample: Pick<Sample, 'remove_sample' | 'loss_mask' | 'response_length'>): boolean {
  if (sample.remove_sample) return false;
  if (!(sample.response_length > 0)) return false;
  if (sample.loss_mask === null) return true;
  return sample.loss_mask.some((value) => value !== 0);
}

// One vote per trajectory: the reward of its highest segment index (on a tie, the later sample,
// the shared anchor rule), averaged over trajectories.
class TrajectoryRewards {
  readonly #anchors = new Map<string, { segmentIndex: number; reward: number }>();

  add(key: string, segmentIndex: number, reward: number): void {
    const current = this.#anchors.get(key);
    if (current === undefined || segmentIndex >= current.segmentIndex)
      this.#anchors.set(key, { segmentIndex, reward });
  }

  mean(): number | undefined {
    if (this.#anchors.size === 0) return undefined;
    let total = 0;
    for (const anchor of this.#anchors.values()) total += anchor.reward;
    return total / this.#anchors.size;
  }
}

/**
 * `rollout/raw_reward_trajectory_mean`: the mean over trajectories of the anchor's raw reward. Only
 * samples with a `parent_traj_id` and trainable loss take part; the anchor is the highest segment
 * index among them. Undefined when no sample carries a `parent_traj_id` (single-segment runs log
 * slime's own mean) or no trajectory has trainable loss.
 */
export function rawRewardTrajectoryMean(
  samples: readonly Sample[],
  options: RolloutMetricOptions = {},
): number | undefined {
  const trajectories = new TrajectoryRewards();
  for (const sample of samples) {
    const id = trajectoryIdOf(sample);
    if (id === null || !hasTrainableLoss(sample)) continue;
    const reward = readRewardValue(sample.reward, options.rewardKey, () => describeSample(sample));
    trajectories.add(id, segmentIndexOf(sample), reward);
  }
  return trajectories.mean();
}

// A teacher id as a metric name component: runs of other characters become `_`.
function metricComponent(value: string): string {
  const component = value
    .trim()
    .replace(/[^A-Za-z0-9_.-]+/g, '_')
    .replace(/^_+|_+$/g, '');
  return component === '' ? 'unnamed' : component;
}

// The trajectory a routed sample's reward counts towards: parent, session, rollout, else the sample.
function routedTrajectoryKey(sample: Sample, position: number): string {
  const metadata = sample.metadata;
  const candidates = [
    metadata.parent_traj_id,
    metadata.session_id,
    sample.session_id,
    metadata.rollout_id,
    sample.rollout_id,
  ];
  let value: unknown = null;
  for (const candidate of candidates) {
    value = candidate;
    if (truthy(candidate)) break;
  }
  return value === null || value === undefined || value === '' ? `sample:${position}` : String(value);
}

/**
 * Per-teacher on-policy-distillation (MOPD) rewards: for every `metadata.teacher_id` among samples
 * with trainable loss, `rollout/mopd/raw_reward_trainable_trajectory_mean/<teacher>` is the mean
 * over that teacher's trajectories of the anchor's raw reward. The teacher id is trimmed and every
 * run of characters other than letters, digits, `_`, `.` and `-` becomes `_`.
 */
export function mopdTeacherMetrics(
  samples: readonly Sample[],
  options: RolloutMetricOptions = {},
): Record<string, number> {
  const byTeacher = new Map<string, TrajectoryRewards>();
  for (let position = 0; position < samples.length; position++) {
    // In bounds: the loop runs over the array's own length.
    const sample = samples[position] as Sample;
    const teacherValue = sample.metadata.teacher_id;
    if (teacherValue === null || teacherValue === undefined || teacherValue === '') continue;
    if (!hasTrainableLoss(sample)) continue;
    const teacher = String(teacherValue).trim();
    let trajectories = byTeacher.get(teacher);
    if (trajectories === undefined) {
      trajectories = new TrajectoryRewards();
      byTeacher.set(teacher, trajectories);
    }
    const reward = readRewardValue(sample.reward, options.rewardKey, () => describeSample(sample));
    trajectories.add(routedTrajectoryKey(sample, position), segmentIndexOf(sample), reward);
  }
  const metrics: Record<string, number> = {};
  for (const [teacher, trajectories] of byTeacher) {
    const mean = trajectories.mean();
    if (mean !== undefined)
      metrics[`rollout/mopd/raw_reward_trainable_trajectory_mean/${metricComponent(teacher)}`] = mean;
  }
  return metrics;
}

/**
 * The rollout metrics Dressage adds to slime's log: {@link computeMultiSegmentMetrics},
 * `rollout/raw_reward_trajectory_mean` when defined and the per-teacher {@link mopdTeacherMetrics}.
 */
export function rolloutLogMetrics(
  samples: readonly Sample[],
  options: RolloutMetricOptions = {},
): Record<string, number> {
  const metrics = computeMultiSegmentMetrics(samples);
  const mean = rawRewardTrajectoryMean(samples, options);
  if (mean !== undefined) metrics['rollout/raw_reward_trajectory_mean'] = mean;
  Object.assign(metrics, mopdTeacherMetrics(samples, options));
  return metrics;
}
