import { segmentIndexOf, trajectoryIdOf } from '@dressage/multi-segment';
import type { Sample } from '@dressage/protocol';

/** Settings of {@link CollapseAlarm}. */
export interface CollapseAlarmOptions {
  /** A step whose gradient norm is this many times the running median raises the alarm. Default 5. */
  gradNormRatio?: number;
  /** Steps in the running median. Default 20. */
  window?: number;
  /** Steps seen before the gradient-norm test starts (a median of two says little). Default 5. */
  warmupSteps?: number;
}

/** What one step looked like to the alarm: metrics to log, and why it rang (absent when it did not). */
export interface CollapseAlarmReading {
  metrics: Record<string, number>;
  reason?: string;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
}

/**
 * Watches each RL step for the two signs that come before and during a collapse: an update far
 * larger than the run's usual (a gradient norm many times its running median: a few stale tokens
 * with huge importance ratios), and a step that cannot train at all (every group scored the same,
 * so every advantage is 0) while the reward is below the run's best. Logs `alarm/grad_norm_ratio`,
 * `alarm/uniform_groups` (the share of groups whose rewards are all equal) and `alarm/raised`.
 */
export class CollapseAlarm {
  readonly #ratio: number;
  readonly #window: number;
  readonly #warmup: number;
  readonly #gradNorms: number[] = [];
  #bestReward = Number.NEGATIVE_INFINITY;

  constructor(options: CollapseAlarmOptions = {}) {
    this.#ratio = options.gradNormRatio ?? 5;
    this.#window = options.window ?? 20;
    this.#warmup = options.warmupSteps ?? 5;
  }

  /**
   * Reads one step: its gradient norm (undefined when the trainer reports none), the rewards of each
   * group (one array per prompt) and the step's mean reward.
   */
  observe(
    gradNorm: number | undefined,
    groups: readonly (readonly number[])[],
    reward: number,
  ): CollapseAlarmReading {
    const metrics: Record<string, number> = {};
    const reasons: string[] = [];
    if (gradNorm !== undefined && Number.isFinite(gradNorm)) {
      if (this.#gradNorms.length >= this.#warmup) {
        const typical = median(this.#gradNorms);
        const ratio = typical > 0 ? gradNorm / typical : 0;
        metrics['alarm/grad_norm_ratio'] = ratio;
        if (ratio >= this.#ratio) reasons.push(`grad norm ${ratio.toFixed(1)}x its median`);
      }
      this.#gradNorms.push(gradNorm);
      if (this.#gradNorms.length > this.#window) this.#gradNorms.shift();
    }
    const scored = groups.filter((group) => group.length > 0);
    if (scored.length > 0) {
      const uniform = scored.filter((group) => group.every((value) => value === group[0])).length;
      metrics['alarm/uniform_groups'] = uniform / scored.length;
      if (uniform === scored.length && reward < this.#bestReward)
        reasons.push('every group scored the same: nothing to learn from');
    }
    this.#bestReward = Math.max(this.#bestReward, reward);
    metrics['alarm/raised'] = reasons.length > 0 ? 1 : 0;
    return reasons.length > 0 ? { metrics, reason: reasons.join('; ') } : { metrics };
  }
}

/**
 * Each group's trajectory rewards: the reward of each trajectory's last segment (the anchor; the
 * segments before it hold 0), one entry per trajectory. Removed samples do not count.
 */
export function groupTrajectoryRewards(groups: readonly (readonly Sample[])[]): number[][] {
  return groups.map((group) => {
    const last = new Map<string, { segment: number; reward: number }>();
    group.forEach((sample, position) => {
      if (sample.remove_sample) return;
      const id = trajectoryIdOf(sample) ?? `#${position}`;
      const segment = segmentIndexOf(sample);
      const seen = last.get(id);
      if (seen === undefined || segment >= seen.segment)
        last.set(id, { segment, reward: Number(sample.reward ?? 0) });
    });
    return [...last.values()].map((entry) => entry.reward);
  });
}
