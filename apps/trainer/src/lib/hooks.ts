import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, extname, isAbsolute, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { TrajectoryProxy, WhiteboxAgentClass } from '@dressage/paddock';
import type { PackedTrainBatch, Sample, TrainBatch } from '@dressage/protocol';
import { DressageError } from '@dressage/protocol';
import { defaultRewardRegistry, RewardRegistry } from '@dressage/reward-registry';
import type {
  createRolloutScheduler,
  GenerateContext,
  GenerateResult,
  RolloutDataSource,
  SamplingParams,
} from '@dressage/schedulers';
import type { ConvertOptions } from '@dressage/trainer-bridge';
import type { Recipe } from './recipe.js';
import type { WarmStartExample } from './warm-start.js';

/** `module#export` → its parts; a bare module means its default export. */
export function parseHookReference(reference: string): { module: string; exportName: string } {
  const hash = reference.lastIndexOf('#');
  if (hash < 0) return { module: reference, exportName: 'default' };
  return { module: reference.slice(0, hash), exportName: reference.slice(hash + 1) };
}

/**
 * Imports a module named in a recipe: a path relative to the recipe (`./task.ts`), an absolute path,
 * or a package specifier. TypeScript recipe files need a TypeScript-aware loader in the process; the
 * `dressage` CLI registers one at start.
 */
export async function importRecipeModule(specifier: string, baseDirectory: string): Promise<object> {
  const isPath = specifier.startsWith('.') || isAbsolute(specifier);
  const file = isPath ? resolve(baseDirectory, specifier) : null;
  const target = file === null ? specifier : pathToFileURL(file).href;
  try {
    return await import(target);
  } catch (error) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Cannot load recipe module ${specifier} (from ${baseDirectory}): ${(error as Error).message}${commonJsHint(error, file)}`,
      cause: error,
      details: { module: specifier },
    });
  }
}

// Node's codes for CommonJS requiring an ES module, which is how a module loaded as CommonJS fails
// to load an ES one (the @dressage packages, or its own ESM syntax).
const requireEsmCodes = new Set(['ERR_REQUIRE_ESM', 'ERR_REQUIRE_CYCLE_MODULE', 'ERR_REQUIRE_ASYNC_MODULE']);

function errorCodes(error: unknown): string[] {
  const codes: string[] = [];
  for (let current = error; current instanceof Error && codes.length < 8; current = current.cause) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') codes.push(code);
  }
  return codes;
}

/**
 * The `type` of the nearest package.json above `directory` (`commonjs` when it has none), or null
 * when there is no package.json up to the root: Node then loads `.ts` and `.js` files as CommonJS.
 */
export function nearestPackageType(directory: string): string | null {
  for (let current = directory; ; current = dirname(current)) {
    const path = join(current, 'package.json');
    if (existsSync(path)) {
      try {
        const type = (JSON.parse(readFileSync(path, 'utf8')) as { type?: unknown }).type;
        return typeof type === 'string' ? type : 'commonjs';
      } catch {
        return 'commonjs';
      }
    }
    if (dirname(current) === current) return null;
  }
}

/**
 * What to do when a recipe's `.ts` or `.js` file failed because Node loaded it as CommonJS: Node's
 * own message speaks of a require() cycle, which names neither the cause nor the fix.
 */
function commonJsHint(error: unknown, file: string | null): string {
  if (file === null || !['.ts', '.js', '.tsx', '.jsx'].includes(extname(file))) return '';
  if (!errorCodes(error).some((code) => requireEsmCodes.has(code))) return '';
  const directory = dirname(file);
  if (nearestPackageType(directory) === 'module') return '';
  return (
    `. Node loaded ${basename(file)} as CommonJS: no package.json from ${directory} up says "type": "module". ` +
    `Add a package.json with {"type": "module"} to ${directory} (dressage init writes one), or rename the file to .m${extname(file).slice(1)}`
  );
}

/** Loads the value a hook reference names, checking that it exists. */
export async function loadHook<T = unknown>(reference: string, baseDirectory: string): Promise<T> {
  const { module, exportName } = parseHookReference(reference);
  const loaded = await importRecipeModule(module, baseDirectory);
  const value: unknown = exportName in loaded ? Reflect.get(loaded, exportName) : undefined;
  if (value === undefined) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Recipe module ${module} has no export "${exportName}" (exports: ${Object.keys(loaded).join(', ') || 'none'})`,
      details: { module, export: exportName },
    });
  }
  return value as T;
}

/** Where a data-source hook finds the recipe's settings. */
export interface DataSourceHookContext {
  recipe: Recipe;
  /** The prompt file, resolved against the recipe. */
  dataPath: string;
}

/** A custom data source with optional position save/load (used by checkpoints and `--resume`). */
export type RunDataSource = RolloutDataSource & {
  save?(directory: string, rolloutId: number): Promise<unknown>;
  /** Restores the position saved for `rolloutId` (the step of the checkpoint resumed). */
  load?(directory: string, rolloutId?: number): Promise<unknown>;
};

/** What a `hooks.generate` function is called with besides the scheduler's context: the run's proxy. */
export interface RunGenerateContext extends GenerateContext {
  /** The recording proxy's base URL: the model endpoint (`/v1/chat/completions`) to send requests to. */
  proxyUrl: string;
  /** The same proxy's trajectory API (finalize, read), e.g. for paddock's `makeGenerate`. */
  proxy: TrajectoryProxy;
}

/**
 * `hooks.generate`: rolls out one sample, as a scheduler's generate function, with the run's proxy
 * in its context.
 */
export type RunGenerateFunction = (
  sample: Sample,
  samplingParams: SamplingParams,
  context: RunGenerateContext,
) => GenerateResult | Promise<GenerateResult>;

/** The recipe's pluggable hooks, loaded. `null` means the built-in behaviour. */
export interface RunHooks {
  /** `hooks.generate`: replaces the agent's generate function; see {@link RunGenerateFunction}. */
  generate: RunGenerateFunction | null;
  /** `hooks.data_source`: builds the data source (default: the JSONL prompt source). */
  dataSource: ((context: DataSourceHookContext) => RunDataSource | Promise<RunDataSource>) | null;
  /** `hooks.rollout_scheduler`: builds the scheduler (same arguments as `createRolloutScheduler`). */
  rolloutScheduler: typeof createRolloutScheduler | null;
  /** `hooks.convert`: samples → packed or plain TrainBatch (default: prompt-equal conversion). */
  convert: ((samples: Sample[], options: ConvertOptions) => PackedTrainBatch | TrainBatch) | null;
  /** `hooks.reward_post_process`: raw and post-processed rewards (default: GRPO normalisation). */
  rewardPostProcess: ConvertOptions['rewardPostProcess'] | null;
  /**
   * `hooks.rollout_log_function`: called each step with the samples and the step's metrics; may return
   * extra metrics to log, or `true` to replace the default rollout metrics.
   */
  rolloutLog:
    | ((
        step: number,
        samples: readonly Sample[],
        metrics: Record<string, number>,
      ) =>
        | Record<string, number>
        | boolean
        | undefined
        | Promise<Record<string, number> | boolean | undefined>)
    | null;
}

async function optionalHook<T>(reference: string | undefined, baseDirectory: string): Promise<T | null> {
  return reference === undefined ? null : loadHook<T>(reference, baseDirectory);
}

/** Loads every hook the recipe names (module paths resolve against the recipe's directory). */
export async function loadRunHooks(recipe: Recipe, baseDirectory: string): Promise<RunHooks> {
  const hooks = recipe.hooks;
  return {
    generate: await optionalHook(hooks.generate, baseDirectory),
    dataSource: await optionalHook(hooks.data_source, baseDirectory),
    rolloutScheduler: await optionalHook(hooks.rollout_scheduler, baseDirectory),
    convert: await optionalHook(hooks.convert, baseDirectory),
    rewardPostProcess: await optionalHook(hooks.reward_post_process, baseDirectory),
    rolloutLog: await optionalHook(hooks.rollout_log_function, baseDirectory),
  };
}

/** The recipe's modules besides its hooks: the whitebox agent class and the warm-start examples. */
export interface RecipeModules {
  /** `agent.module`; null without an `agent` section. */
  agent: WhiteboxAgentClass | null;
  /** `warm_start.examples`; null when unset. */
  warmStartExamples: ((record: Record<string, unknown>) => WarmStartExample[]) | null;
}

/** Loads `agent.module` and `warm_start.examples` (paths resolve against the recipe's directory). */
export async function loadRecipeModules(recipe: Recipe, baseDirectory: string): Promise<RecipeModules> {
  return {
    agent: await optionalHook(recipe.agent?.module, baseDirectory),
    warmStartExamples: await optionalHook(recipe.warm_start.examples, baseDirectory),
  };
}

/**
 * The run's reward registry: `hooks.reward_modules` loaded into it (a module's `rewards`/`register`
 * exports land here, once per run), over the process-wide one that `registerReward` writes to.
 */
export async function loadRunRewards(recipe: Recipe, baseDirectory: string): Promise<RewardRegistry> {
  const registry = new RewardRegistry({ parent: defaultRewardRegistry });
  if (recipe.hooks.reward_modules.length > 0) {
    try {
      await registry.loadModules(recipe.hooks.reward_modules, { baseDirectory });
    } catch (error) {
      const hint = recipe.hooks.reward_modules
        .filter((specifier) => specifier.startsWith('.') || isAbsolute(specifier))
        .map((specifier) => commonJsHint(error, resolve(baseDirectory, specifier)))
        .find((text) => text !== '');
      if (hint === undefined || !DressageError.isInstance(error)) throw error;
      throw new DressageError({
        code: error.code,
        message: `${error.message}${hint}`,
        cause: error,
        ...(error.details === undefined ? {} : { details: error.details }),
      });
    }
  }
  return registry;
}
