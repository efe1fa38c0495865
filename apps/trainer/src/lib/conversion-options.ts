import type { ConvertOptions } from '@dressage/trainer-bridge';
import type { Recipe } from './recipe.js';

/**
 * What the conversion of a step's samples into a train batch takes from the recipe: the advantage
 * estimator, whether GRPO divides by the group's standard deviation (`loss.grpo_std_normalization`),
 * the global batch size, the longest sequence trained (`training.max_sequence_length`) and a
 * `hooks.reward_post_process` replacing the default.
 */
export function conversionOptionsOf(
  recipe: Recipe,
  globalBatchSize: number,
  rewardPostProcess: ConvertOptions['rewardPostProcess'] | null,
): ConvertOptions {
  return {
    advantageEstimator: recipe.loss.advantage_estimator,
    standardDeviationNormalization: recipe.loss.grpo_std_normalization,
    globalBatchSize,
    ...(recipe.training.max_sequence_length === undefined
      ? {}
      : { maxSequenceLength: recipe.training.max_sequence_length }),
    ...(rewardPostProcess === null ? {} : { rewardPostProcess }),
  };
}
