import { join, resolve } from 'node:path';
import type { LoadedRecipe, Recipe } from './recipe.js';

/** What a run takes from its recipe before it starts anything: paths, the stack, its step counts. */
export interface RunPlan {
  /** `output_dir`, resolved against the working directory. */
  outputDirectory: string;
  /** `data.path`, resolved against the recipe. */
  dataPath: string;
  /** The run's own proxy store, in its output directory. */
  proxyStore: string;
  /** `embedded`: the engine, trainer and proxy on this machine; `cluster`: SGLang and a gRPC trainer. */
  stack: 'embedded' | 'cluster';
  /** RL steps: the caller's override, else `training.steps`. */
  totalSteps: number;
  /** Supervised steps before RL (`warm_start.steps`). */
  warmStartSteps: number;
  /** Sandboxes of a whitebox agent that has a sandbox (`agent.sandbox_slots`, default 2). */
  sandboxSlots: number;
}

/** The {@link RunPlan} of a loaded recipe; `steps` overrides `training.steps`. */
export function runPlanOf(loaded: LoadedRecipe, options: { steps?: number } = {}): RunPlan {
  const { recipe } = loaded;
  const outputDirectory = resolve(recipe.output_dir);
  return {
    outputDirectory,
    dataPath: loaded.resolvePath(recipe.data.path),
    proxyStore: join(outputDirectory, 'proxy-store'),
    stack: recipe.engine.kind === 'embedded' ? 'embedded' : 'cluster',
    totalSteps: options.steps ?? recipe.training.steps,
    warmStartSteps: recipe.warm_start.steps,
    sandboxSlots: recipe.agent?.sandbox_slots ?? 2,
  };
}

/** Whether the weights reach the engine after RL step `step` (0-based): every `update_weights_interval`-th. */
export function publishesAfterStep(recipe: Recipe, step: number): boolean {
  return (step + 1) % recipe.rollout.update_weights_interval === 0;
}

/** Whether `report.html` is rewritten after RL step `step`: every `training.report_interval`-th. */
export function reportsAfterStep(recipe: Recipe, step: number): boolean {
  return (step + 1) % recipe.training.report_interval === 0;
}

/** Whether a checkpoint is saved after RL step `step`: every `training.checkpoint_interval`-th, and the last. */
export function checkpointsAfterStep(recipe: Recipe, step: number, totalSteps: number): boolean {
  return (step + 1) % recipe.training.checkpoint_interval === 0 || step + 1 === totalSteps;
}
