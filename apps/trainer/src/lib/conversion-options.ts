import type { ConvertOptions } from '@dressage/trainer-bridge';
import type { Recipe } from './recipe.js';

/** The model shape `training.routing_replay` gives the generate functions, or null when it is off. */
export function routingReplayOf(
  recipe: Pick<Recipe, 'training'>,
): { numLayers: number; moeRouterTopk: number } | null {
  const replay = recipe.training.routing_replay;
  return replay === undefined
    ? null
    : { numLayers: replay.num_layers, moeRouterTopk: replay.moe_router_topk };
}

/**
 * The expansion and conversion options of `training.routing_replay`: on, with the model's shape
 * routed experts are decoded to; nothing when unset.
 */
export function routingReplayOptionsOf(recipe: Pick<Recipe, 'training'>): {
  useRolloutRoutingReplay?: true;
  numLayers?: number;
  moeRouterTopk?: number;
} {
  const replay = recipe.training.routing_replay;
  if (replay === undefined) return {};
  return {
    useRolloutRoutingReplay: true,
    numLayers: replay.num_layers,
    moeRouterTopk: replay.moe_router_topk,
  };
}

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
    ...routingReplayOptionsOf(recipe),
  };
}
