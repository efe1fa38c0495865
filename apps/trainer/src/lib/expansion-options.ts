import { routingReplayOf } from './conversion-options.js';
import type { Recipe } from './recipe.js';

/** What the generate functions pass on when a trajectory's segments become samples. */
export interface ExpansionOptions {
  maxTokensPerGpu: number | null;
  contextParallelSize: number;
  maskNonlastVersionTokens: boolean;
  /** `training.routing_replay`: the model shape routed experts are decoded to; null when off. */
  routingReplay: { numLayers: number; moeRouterTopk: number } | null;
}

/** What a whitebox generate function takes from the recipe besides the expansion settings. */
export interface WhiteboxSettings extends ExpansionOptions {
  maxTurns: number;
}

/**
 * The recipe's settings for turning segments into samples, for whitebox and blackbox generate
 * functions alike: the token cap `training.max_tokens_per_gpu × training.context_parallel_size`,
 * `proxy.mask_nonlast_version_tokens` and `training.routing_replay`.
 */
export function expansionOptionsOf(recipe: Recipe): ExpansionOptions {
  return {
    maxTokensPerGpu: recipe.training.max_tokens_per_gpu ?? null,
    contextParallelSize: recipe.training.context_parallel_size,
    maskNonlastVersionTokens: recipe.proxy.mask_nonlast_version_tokens,
    routingReplay: routingReplayOf(recipe),
  };
}

/** {@link expansionOptionsOf} and `rollout.max_turns`, the model requests a whitebox run may make. */
export function whiteboxSettingsOf(recipe: Recipe): WhiteboxSettings {
  return { ...expansionOptionsOf(recipe), maxTurns: recipe.rollout.max_turns };
}
