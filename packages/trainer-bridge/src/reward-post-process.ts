import { findTrajectoryAnchors, trajectoryIdOf } from '@dressage/multi-segment';
import type { Sample } from '@dressage/protocol';
import { describeSample, readRewardValue } from '@dressage/reward-registry';
import {
  dividesByStandardDeviation,
  normalizesRewards,
  resolveTrainingOptions,
  type TrainingOptions,
} from './training-options.js';

/** The threshold below which a group's standard deviation is treated as zero (no division). */
export const STANDARD_DEVIATION_EPSILON = 1e-6;

/** Raw and post-processed rewards, one per sample in input order. */
export interface PostProcessedRewards {
  /** Each sample's own reward as a number (never broadcast). */
  rawRewards: number[];
  /** What the trainer uses as the sample's advantage scale. */
  rewards: number[];
}

type RewardSample = Pick<
  Sample,
  'reward' | 'remove_sample' | 'group_index' | 'metadata' | 'index' | 'session_id'
>;

/**
 * Reward post-processing over a flat batch (slime's `--custom-reward-post-process-path` contract).
 *
 * A trajectory's reward lives on its anchor (see `findTrajectoryAnchors`). For `grpo`, `gspo` and
 * `reinforce_plus_plus_baseline` with normalisation on, each prompt group (`group_index`; none → -1)
 * of anchors and live stand-alone samples is centred on its mean and, for `grpo`/`gspo` with
 * standard-deviation normalisation, divided by its population standard deviation when that exceeds
 * 1e-6. Every live segment then gets its anchor's value, so all segments of a trajectory share one
 * advantage. Other estimators, or normalisation off, broadcast the anchor's raw reward. Removed
 * samples keep their raw value. An object reward without the configured `rewardKey` is an
 * `invalid_argument` error naming the key and the sample.
 */
export function rewardPostProcess(
  samples: readonly RewardSample[],
  options: TrainingOptions = {},
): PostProcessedRewards {
  const resolved = resolveTrainingOptions(options);
  const rawRewards = samples.map((sample) =>
    readRewardValue(sample.reward, resolved.rewardKey, () => describeSample(sample)),
  );
  const anchors = findTrajectoryAnchors(samples);
  const values = rawRewards.slice();

  if (resolved.rewardsNormalization && normalizesRewards(resolved.advantageEstimator)) {
    const divide =
      resolved.standardDeviationNormalization && dividesByStandardDeviation(resolved.advantageEstimator);
    const groups = new Map<number, number[]>();
    for (let position = 0; position < samples.length; position++) {
      const sample = samples[position] as RewardSample;
      if (sample.remove_sample) continue;
      const id = trajectoryIdOf(sample);
      // One member per trajectory: its anchor. Non-anchor segments would count a trajectory twice.
      if (id !== null && anchors.get(id) !== position) continue;
      const key = sample.group_index ?? -1;
      const members = groups.get(key);
      if (members === undefined) groups.set(key, [position]);
      else members.push(position);
    }
    for (const members of groups.values()) {
      let sum = 0;
      for (const position of members) sum += rawRewards[position] as number;
      const mean = sum / members.length;
      let squares = 0;
      for (const position of members) squares += ((rawRewards[position] as number) - mean) ** 2;
      const deviation = Math.sqrt(squares / members.length);
      const scale = divide && deviation > STANDARD_DEVIATION_EPSILON ? deviation : 1;
      for (const position of members) values[position] = ((rawRewards[position] as number) - mean) / scale;
    }
  }

  const rewards = samples.map((sample, position) => {
    if (sample.remove_sample) return rawRewards[position] as number;
    const id = trajectoryIdOf(sample);
    const anchor = id === null ? position : (anchors.get(id) as number);
    return values[anchor] as number;
  });
  return { rawRewards, rewards };
}
