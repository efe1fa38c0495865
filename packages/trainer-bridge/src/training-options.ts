import { DressageError } from '@dressage/protocol';

/** slime's `--advantage-estimator` choices. */
export const advantageEstimators = [
  'grpo',
  'gspo',
  'cispo',
  'reinforce_plus_plus',
  'reinforce_plus_plus_baseline',
  'ppo',
] as const;

/** One of {@link advantageEstimators}. */
export type AdvantageEstimator = (typeof advantageEstimators)[number];

/** The settings reward post-processing and conversion read. Every field has a default. */
export interface TrainingOptions {
  /** slime's `--advantage-estimator`. */
  advantageEstimator?: AdvantageEstimator;
  /** Group-normalise rewards (slime's default; `--disable-rewards-normalization` turns it off). */
  rewardsNormalization?: boolean;
  /**
   * Divide GRPO/GSPO rewards by the group's population standard deviation when it exceeds 1e-6.
   * Off is Dr.GRPO (`--disable-grpo-std-normalization`).
   */
  standardDeviationNormalization?: boolean;
  /** Key read from object-valued rewards (slime's `--reward-key`). */
  rewardKey?: string | null;
  /**
   * Rollouts per optimizer step (slime's `--global-batch-size`). Required by the prompt-equal
   * denominators of `grpo` and `reinforce_plus_plus_baseline`.
   */
  globalBatchSize?: number | null;
}

/** {@link TrainingOptions} with every default applied. */
export type ResolvedTrainingOptions = Required<TrainingOptions>;

/**
 * The defaults, stated once and used by both reward post-processing and conversion: GRPO with
 * reward normalisation and standard-deviation normalisation on (slime's CLI defaults).
 */
export const trainingDefaults: Readonly<ResolvedTrainingOptions> = Object.freeze({
  advantageEstimator: 'grpo',
  rewardsNormalization: true,
  standardDeviationNormalization: true,
  rewardKey: null,
  globalBatchSize: null,
});

const estimatorSet: ReadonlySet<string> = new Set(advantageEstimators);

/** Applies {@link trainingDefaults} and checks the values. */
export function resolveTrainingOptions(options: TrainingOptions = {}): ResolvedTrainingOptions {
  const resolved: ResolvedTrainingOptions = {
    advantageEstimator: options.advantageEstimator ?? trainingDefaults.advantageEstimator,
    rewardsNormalization: options.rewardsNormalization ?? trainingDefaults.rewardsNormalization,
    standardDeviationNormalization:
      options.standardDeviationNormalization ?? trainingDefaults.standardDeviationNormalization,
    rewardKey: options.rewardKey ?? trainingDefaults.rewardKey,
    globalBatchSize: options.globalBatchSize ?? trainingDefaults.globalBatchSize,
  };
  if (!estimatorSet.has(resolved.advantageEstimator)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Unknown advantage estimator "${resolved.advantageEstimator}"; expected one of ${advantageEstimators.join(', ')}`,
    });
  }
  const size = resolved.globalBatchSize;
  if (size !== null && (!Number.isInteger(size) || size <= 0)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `globalBatchSize must be a positive integer, got ${size}`,
    });
  }
  return resolved;
}

/** Estimators whose rewards are centred per prompt group. */
export function normalizesRewards(estimator: AdvantageEstimator): boolean {
  return estimator === 'grpo' || estimator === 'gspo' || estimator === 'reinforce_plus_plus_baseline';
}

/** Estimators whose centred rewards are also divided by the group's standard deviation. */
export function dividesByStandardDeviation(estimator: AdvantageEstimator): boolean {
  return estimator === 'grpo' || estimator === 'gspo';
}

/** Estimators trained with prompt-equal loss denominators (the others use trajectory-equal ones). */
export function usesPromptEqualDenominators(estimator: AdvantageEstimator): boolean {
  return estimator === 'grpo' || estimator === 'reinforce_plus_plus_baseline';
}
