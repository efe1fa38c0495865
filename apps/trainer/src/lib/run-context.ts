// One run in progress: what it loads from its recipe, what its phases share, and the weights the
// engine serves.
import { resolve } from 'node:path';
import { DressageError } from '@dressage/protocol';
import type { ProxyClient } from '@dressage/proxy';
import type { RewardRegistry } from '@dressage/reward-registry';
import type { EmbeddedStack } from './embedded-stack.js';
import type { ErrorLog } from './error-log.js';
import {
  loadRecipeModules,
  loadRunHooks,
  loadRunRewards,
  type RecipeModules,
  type RunDataSource,
  type RunHooks,
} from './hooks.js';
import type { MetricsLog } from './metrics-log.js';
import type { Progress } from './progress.js';
import type { LoadedRecipe, Recipe } from './recipe.js';
import type { RunPlan } from './run-plan.js';
import type { VersionHistory } from './token-versions.js';
import type { RunTrainingOptions } from './training-run.js';
import { type PauseSettings, type PublishedWeights, publishWeights } from './weight-publish.js';
import { needsSandbox } from './whitebox-sandboxes.js';

/** What a run loads from its recipe before anything starts. */
export interface RunSetup {
  hooks: RunHooks;
  modules: RecipeModules;
  registry: RewardRegistry;
  /** What every reward function reads as `context.args`: the validated recipe, a frozen copy. */
  rewardArgs: Readonly<Record<string, unknown>>;
}

/** Checks that the recipe names a way to run (stack, agent) and loads its hooks, modules and rewards. */
export async function loadRunSetup(loaded: LoadedRecipe, embedded: boolean): Promise<RunSetup> {
  const { recipe } = loaded;
  if (!embedded && recipe.trainer.kind !== 'grpc') {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${loaded.path}: use an embedded engine (with the embedded trainer or a gRPC one), or SGLang with a gRPC trainer`,
    });
  }
  const baseDirectory = resolve(loaded.path, '..');
  const hooks = await loadRunHooks(recipe, baseDirectory);
  if (recipe.agent?.module === undefined && hooks.generate === null && recipe.blackbox === undefined) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${loaded.path}: set agent.module (a whitebox agent class), blackbox (an agent CLI) or hooks.generate`,
    });
  }
  const modules = await loadRecipeModules(recipe, baseDirectory);
  if (recipe.agent?.sandbox_slots !== undefined && !needsSandbox(modules.agent)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${loaded.path}: agent.sandbox_slots is set, but ${recipe.agent.module} does not extend PaddockWhiteboxAgent (it has no sandbox)`,
      details: { field: 'agent.sandbox_slots' },
    });
  }
  const registry = await loadRunRewards(recipe, baseDirectory);
  const rewardArgs = structuredClone(recipe) as unknown as Readonly<Record<string, unknown>>;
  return { hooks, modules, registry, rewardArgs };
}

/** One run in progress: what its phases share, and the weights the engine serves. */
export interface RunContext {
  loaded: LoadedRecipe;
  recipe: Recipe;
  options: RunTrainingOptions;
  log: (line: string) => void;
  plan: RunPlan;
  setup: RunSetup;
  stack: EmbeddedStack;
  proxyClient: ProxyClient;
  pauseSettings: PauseSettings;
  dataSource: RunDataSource;
  metricsLog: MetricsLog;
  errorLog: ErrorLog;
  progress: Progress;
  history: VersionHistory;
  /** `performance.now()` when the stack was up. */
  started: number;
  /** The version the engine serves now. */
  weightVersion: string;
  /** RL steps completed (the step running, during one). */
  step: number;
}

/** Publishes the trainer's weights and records the version the engine now serves. */
export async function publish(run: RunContext, reason: string): Promise<PublishedWeights> {
  const published = await publishWeights(
    run.stack.trainer,
    run.proxyClient,
    reason,
    run.pauseSettings,
    run.log,
  );
  run.weightVersion = published.weightVersion;
  run.history.publish(run.weightVersion);
  return published;
}
