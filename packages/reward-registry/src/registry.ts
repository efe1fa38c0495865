import { createRequire } from 'node:module';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DressageError, type Sample } from '@dressage/protocol';
import { builtinRewards } from './builtins.js';
import type { RewardValue } from './reward-value.js';

/** What a reward function receives besides the sample. */
export interface RewardContext {
  /** The registered name the function was called under. */
  name: string;
  /** Aborted when the call's timeout elapses; long-running rewards should stop on it. */
  signal: AbortSignal;
  /**
   * The run's settings, read-only (the reference's `args=`): under `dressage train` the validated
   * recipe with its defaults, deeply frozen; `{}` when the caller passes none.
   */
  args: Readonly<Record<string, unknown>>;
}

/** A reward function: sync or async, returning a number or an object read through a reward key. */
export type RewardFunction = (sample: Sample, context: RewardContext) => RewardValue | Promise<RewardValue>;

/** The environment variable naming reward modules to load: comma-separated package specifiers or file paths. */
export const REWARD_MODULES_ENVIRONMENT_VARIABLE = 'DRESSAGE_REWARD_MODULES';

/** What a reward module may export to register its functions (besides calling `registerReward` on import). */
export interface RewardModule {
  /** Called once with the registry that loads the module. */
  register?: (registry: RewardRegistry) => void | Promise<void>;
  /** Functions registered under their keys. */
  rewards?: Readonly<Record<string, RewardFunction>>;
}

/** Options of the {@link RewardRegistry} constructor. */
export interface RewardRegistryOptions {
  /** Start with the built-in rewards. Default true. */
  builtins?: boolean;
  /**
   * A registry consulted for names this one does not hold, e.g. {@link defaultRewardRegistry}, where
   * modules that call `registerReward` on import put their functions. Names here win.
   */
  parent?: RewardRegistry | null;
}

/** Options of {@link RewardRegistry.loadModules}. */
export interface LoadModulesOptions {
  /** Directory relative file paths and package specifiers resolve from. Default `process.cwd()`. */
  baseDirectory?: string;
}

/**
 * Splits a `DRESSAGE_REWARD_MODULES`-style value into specifiers: comma-separated, trimmed, empty
 * entries dropped.
 */
export function parseRewardModuleList(value: string | undefined | null): string[] {
  if (!value) return [];
  return value
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
}

function isFilePath(specifier: string): boolean {
  return (
    specifier.startsWith('.') ||
    isAbsolute(specifier) ||
    specifier.startsWith('file:') ||
    /\.(?:[cm]?js|[cm]?ts)$/.test(specifier)
  );
}

// Package specifiers resolve from the user's project, not from wherever this library is installed;
// ESM-only packages without a `require` condition fall back to a plain import.
function moduleUrl(specifier: string, baseDirectory: string): string {
  if (specifier.startsWith('file:')) return specifier;
  if (isFilePath(specifier)) return pathToFileURL(resolve(baseDirectory, specifier)).href;
  try {
    return pathToFileURL(createRequire(resolve(baseDirectory, 'package.json')).resolve(specifier)).href;
  } catch {
    return specifier;
  }
}

function isModuleNotFound(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
}

/**
 * A set of named reward functions. Names are unique: registering a taken name is an error, so two
 * modules cannot silently shadow each other.
 */
export class RewardRegistry {
  readonly #functions = new Map<string, RewardFunction>();
  // Keyed by resolved URL so "./a.js" and its absolute path load once; the promise makes
  // concurrent loads of one module share a single import.
  readonly #loadedModules = new Map<string, Promise<void>>();

  readonly #parent: RewardRegistry | null;

  /** Creates a registry; with `builtins` (default true) it starts with the built-in rewards. */
  constructor(options: RewardRegistryOptions = {}) {
    this.#parent = options.parent ?? null;
    if (options.builtins ?? true) {
      for (const [name, fn] of Object.entries(builtinRewards)) this.register(name, fn);
    }
  }

  /** Registers `fn` under `name`. Throws `already_exists` when the name is taken. */
  register(name: string, fn: RewardFunction): void {
    if (typeof name !== 'string' || name.trim() === '') {
      throw new DressageError({
        code: 'invalid_argument',
        message: 'A reward function needs a non-empty name',
      });
    }
    if (typeof fn !== 'function') {
      throw new DressageError({
        code: 'invalid_argument',
        message: `Reward "${name}" must be a function, got ${typeof fn}`,
      });
    }
    if (this.#functions.has(name)) {
      throw new DressageError({
        code: 'already_exists',
        message: `A reward function named "${name}" is already registered`,
        details: { name },
      });
    }
    this.#functions.set(name, fn);
  }

  /** True when a function is registered under `name` here or in the parent registry. */
  has(name: string): boolean {
    return this.#functions.has(name) || (this.#parent?.has(name) ?? false);
  }

  /** The registered names (with the parent registry's), sorted. */
  names(): string[] {
    return [...new Set([...this.#functions.keys(), ...(this.#parent?.names() ?? [])])].sort();
  }

  /** The function registered under `name`. Throws `not_found` listing the registered names. */
  get(name: string): RewardFunction {
    const fn = this.#functions.get(name) ?? (this.#parent?.has(name) ? this.#parent.get(name) : undefined);
    if (fn === undefined) {
      const names = this.names();
      throw new DressageError({
        code: 'not_found',
        message: `No reward function named "${name}"; registered: ${names.join(', ') || '(none)'}`,
        details: { name, registered: names },
      });
    }
    return fn;
  }

  /**
   * Imports reward modules, each at most once per registry. `modules` is a list or a comma-separated
   * string; when omitted, `DRESSAGE_REWARD_MODULES` is read. A module registers its rewards by
   * calling `registerReward` when imported, by exporting `register(registry)`, or by exporting a
   * `rewards` object. Returns the specifiers loaded by this call.
   */
  async loadModules(
    modules?: string | readonly string[],
    options: LoadModulesOptions = {},
  ): Promise<string[]> {
    const specifiers =
      modules === undefined
        ? parseRewardModuleList(process.env[REWARD_MODULES_ENVIRONMENT_VARIABLE])
        : typeof modules === 'string'
          ? parseRewardModuleList(modules)
          : modules.map((entry) => entry.trim()).filter((entry) => entry !== '');
    const baseDirectory = options.baseDirectory ?? process.cwd();
    const loaded: string[] = [];
    await Promise.all(
      specifiers.map(async (specifier) => {
        const url = moduleUrl(specifier, baseDirectory);
        let pending = this.#loadedModules.get(url);
        if (pending === undefined) {
          pending = this.#importModule(specifier, url);
          this.#loadedModules.set(url, pending);
          // A failed load may be retried after the cause is fixed.
          pending.catch(() => this.#loadedModules.delete(url));
          loaded.push(specifier);
        }
        await pending;
      }),
    );
    return loaded;
  }

  async #importModule(specifier: string, url: string): Promise<void> {
    let imported: RewardModule;
    try {
      imported = (await import(url)) as RewardModule;
    } catch (error) {
      throw new DressageError({
        code: isModuleNotFound(error) ? 'not_found' : 'failed_precondition',
        message: `Cannot load reward module "${specifier}" (listed in ${REWARD_MODULES_ENVIRONMENT_VARIABLE} or passed to loadModules): ${error instanceof Error ? error.message : String(error)}`,
        details: { module: specifier, url },
        cause: error,
      });
    }
    try {
      if (typeof imported.register === 'function') await imported.register(this);
      if (imported.rewards !== undefined && imported.rewards !== null) {
        for (const [name, fn] of Object.entries(imported.rewards)) this.register(name, fn);
      }
    } catch (error) {
      const reason = DressageError.from(error);
      throw new DressageError({
        code: reason.code === 'unknown' ? 'failed_precondition' : reason.code,
        message: `Reward module "${specifier}" failed to register its rewards: ${reason.message}`,
        details: { module: specifier },
        cause: error,
      });
    }
  }
}

// One process-wide registry even when two copies of this package are loaded (a reward module that
// resolves the package from its own folder, the app from another): `registerReward` in either
// reaches the registry the app scores with.
const defaultRegistryKey = Symbol.for('@dressage/reward-registry/default');
const processGlobals = globalThis as { [defaultRegistryKey]?: RewardRegistry };

processGlobals[defaultRegistryKey] ??= new RewardRegistry();

/**
 * The process-wide registry `registerReward`, `getRewardFunction` and the dispatcher use by default.
 * A run's own registry takes it as `parent`, so rewards registered on import are found.
 */
export const defaultRewardRegistry: RewardRegistry = processGlobals[defaultRegistryKey];

/** Registers `fn` under `name` in the default registry (duplicate name → `already_exists`). */
export function registerReward(name: string, fn: RewardFunction): void {
  defaultRewardRegistry.register(name, fn);
}

/** Looks a reward up in the default registry (missing → `not_found` listing the registered names). */
export function getRewardFunction(name: string): RewardFunction {
  return defaultRewardRegistry.get(name);
}

/** Loads reward modules into the default registry (see {@link RewardRegistry.loadModules}). */
export function loadRewardModules(
  modules?: string | readonly string[],
  options?: LoadModulesOptions,
): Promise<string[]> {
  return defaultRewardRegistry.loadModules(modules, options);
}
