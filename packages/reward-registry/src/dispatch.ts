import { DressageError, type Sample } from '@dressage/protocol';
import { describeSample } from './describe-sample.js';
import { defaultRewardRegistry, type RewardRegistry } from './registry.js';
import { requireRewardNumber } from './reward-value.js';

/** Options of {@link computeReward} and {@link computeRewards}. */
export interface ComputeRewardOptions {
  /** Registry to look functions up in. Default: the process-wide registry. */
  registry?: RewardRegistry;
  /** Function used when a sample has no `metadata.reward_fn`. Default `"default"`. */
  defaultRewardFunction?: string;
  /** Key read from object-valued rewards (slime's `--reward-key`). */
  rewardKey?: string | null;
  /**
   * Milliseconds one reward call may take; past it the call fails with `deadline_exceeded` and its
   * signal is aborted. A synchronous function that blocks the event loop cannot be interrupted.
   */
  timeoutMs?: number;
  /**
   * Load the modules named in `DRESSAGE_REWARD_MODULES` (once) before the first call. Default true.
   */
  loadModulesFromEnvironment?: boolean;
  /** Cancels pending calls. */
  signal?: AbortSignal;
  /**
   * The run's settings every reward function receives as `context.args` (the reference's `args=`).
   * Frozen (deeply) before the first call, so no reward can change what the next one reads. Default `{}`.
   */
  args?: Readonly<Record<string, unknown>>;
}

const emptyArgs: Readonly<Record<string, unknown>> = Object.freeze({});

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const entry of Object.values(value)) deepFreeze(entry);
  }
  return value;
}

function rewardFunctionName(sample: Sample, fallback: string): string {
  const name = sample.metadata.reward_fn;
  if (name === undefined || name === null || name === '') return fallback;
  if (typeof name !== 'string') {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${describeSample(sample)}: metadata.reward_fn must be a string, got ${JSON.stringify(name)}`,
    });
  }
  return name;
}

async function callWithTimeout<T>(
  run: (signal: AbortSignal) => T | Promise<T>,
  timeoutMs: number | undefined,
  outer: AbortSignal | undefined,
  where: string,
): Promise<T> {
  const controller = new AbortController();
  const cleanups: (() => void)[] = [];
  const stopped = new Promise<never>((_, reject) => {
    if (timeoutMs !== undefined) {
      const timer = setTimeout(() => {
        const error = new DressageError({
          code: 'deadline_exceeded',
          message: `${where} did not finish within ${timeoutMs} ms`,
          details: { timeout_ms: timeoutMs },
        });
        controller.abort(error);
        reject(error);
      }, timeoutMs);
      cleanups.push(() => clearTimeout(timer));
    }
    if (outer !== undefined) {
      const onAbort = () => {
        const error = new DressageError({
          code: 'cancelled',
          message: `${where} was cancelled`,
          cause: outer.reason,
        });
        controller.abort(error);
        reject(error);
      };
      if (outer.aborted) onAbort();
      else {
        outer.addEventListener('abort', onAbort, { once: true });
        cleanups.push(() => outer.removeEventListener('abort', onAbort));
      }
    }
  });
  // The losing side of the race must not surface as an unhandled rejection.
  stopped.catch(() => {});
  try {
    return await Promise.race([Promise.resolve().then(() => run(controller.signal)), stopped]);
  } finally {
    for (const cleanup of cleanups) cleanup();
  }
}

async function computeOne(
  sample: Sample,
  options: ComputeRewardOptions,
  registry: RewardRegistry,
): Promise<number> {
  const name = rewardFunctionName(sample, options.defaultRewardFunction ?? 'default');
  const fn = registry.get(name);
  const args = options.args === undefined ? emptyArgs : deepFreeze(options.args);
  const where = `Reward function "${name}" on ${describeSample(sample)}`;
  let value: unknown;
  try {
    value = await callWithTimeout(
      (signal) => fn(sample, { name, signal, args }),
      options.timeoutMs,
      options.signal,
      where,
    );
  } catch (error) {
    if (
      DressageError.isInstance(error) &&
      (error.code === 'deadline_exceeded' || error.code === 'cancelled')
    ) {
      throw error;
    }
    throw new DressageError({
      code: 'unknown',
      message: `${where} threw: ${error instanceof Error ? error.message : String(error)}`,
      details: { reward_fn: name, sample_index: sample.index },
      cause: error,
    });
  }
  return requireRewardNumber(value, options.rewardKey, where);
}

async function prepare(options: ComputeRewardOptions): Promise<RewardRegistry> {
  const registry = options.registry ?? defaultRewardRegistry;
  if (options.loadModulesFromEnvironment ?? true) await registry.loadModules();
  return registry;
}

/**
 * Computes one sample's reward with the function named by its `metadata.reward_fn` (default
 * `"default"`). A throwing function, a timeout or a non-numeric result is a DressageError naming the
 * function and the sample.
 */
export async function computeReward(sample: Sample, options: ComputeRewardOptions = {}): Promise<number> {
  return computeOne(sample, options, await prepare(options));
}

/**
 * Computes the rewards of a list of samples concurrently, each with its own `metadata.reward_fn`;
 * the result keeps the input order. The first failure rejects the whole call.
 */
export async function computeRewards(
  samples: readonly Sample[],
  options: ComputeRewardOptions = {},
): Promise<number[]> {
  const registry = await prepare(options);
  return Promise.all(samples.map((sample) => computeOne(sample, options, registry)));
}

/**
 * slime's `--custom-rm-path` contract in one function: a single sample gives one reward, a list
 * gives one reward per sample in order.
 */
export function dispatchRewards(sample: Sample, options?: ComputeRewardOptions): Promise<number>;
export function dispatchRewards(
  samples: readonly Sample[],
  options?: ComputeRewardOptions,
): Promise<number[]>;
export function dispatchRewards(
  input: Sample | readonly Sample[],
  options: ComputeRewardOptions = {},
): Promise<number | number[]> {
  return Array.isArray(input) ? computeRewards(input, options) : computeReward(input as Sample, options);
}
