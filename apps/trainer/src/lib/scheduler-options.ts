import {
  createRolloutScheduler,
  type RolloutScheduler,
  type SchedulerDependencies,
  type SchedulerOptionsInput,
} from '@dressage/schedulers';
import type { Recipe } from './recipe.js';

/**
 * What the rollout scheduler takes from the recipe: batch sizes, the run's rollouts, retries, the
 * async budget, staleness control and the sampling parameters every generate call gets. Settings
 * the recipe leaves unset are left out, so the scheduler's own environment and defaults apply.
 */
export function schedulerOptionsOf(recipe: Recipe, totalSteps: number): SchedulerOptionsInput {
  const { rollout } = recipe;
  return {
    rolloutBatchSize: recipe.data.rollout_batch_size,
    nSamplesPerPrompt: recipe.data.n_samples_per_prompt,
    numRollout: totalSteps,
    // Partial-async returns after this many samples (when below a full rollout).
    ...(recipe.training.global_batch_size === undefined
      ? {}
      : { globalBatchSize: recipe.training.global_batch_size }),
    maxRetries: rollout.max_retries,
    stalenessKeepVersions: rollout.keep_versions ?? 0,
    ...(rollout.max_active_samples === undefined
      ? {}
      : { asyncMaxActiveSamples: rollout.max_active_samples }),
    ...(rollout.max_outstanding_groups === undefined
      ? {}
      : { asyncMaxOutstandingGroups: rollout.max_outstanding_groups }),
    ...(rollout.recall_stale_groups === undefined
      ? {}
      : { stalenessRecallInFlight: rollout.recall_stale_groups }),
    samplingParams: {
      temperature: rollout.temperature,
      top_p: rollout.top_p,
      max_new_tokens: rollout.max_new_tokens,
    },
  };
}

/**
 * The run's rollout scheduler: `rollout.mode`'s scheduler (or `hooks.rollout_scheduler`, given the
 * same arguments) with {@link schedulerOptionsOf}.
 */
export function createRunScheduler(
  recipe: Recipe,
  dependencies: SchedulerDependencies,
  totalSteps: number,
  hook: typeof createRolloutScheduler | null = null,
): RolloutScheduler {
  return (hook ?? createRolloutScheduler)(
    recipe.rollout.mode,
    dependencies,
    schedulerOptionsOf(recipe, totalSteps),
  );
}
