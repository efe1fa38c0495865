import { AsyncRolloutScheduler } from './async-rollout.js';
import type { RolloutMode } from './generate.js';
import { resolveSchedulerOptions, type SchedulerOptionsInput } from './options.js';
import type { RolloutScheduler, SchedulerDependencies } from './scheduler.js';
import { SyncRolloutScheduler } from './sync-rollout.js';

/**
 * Builds the scheduler of `mode`. Options are validated and completed from `env` (default
 * `process.env`); explicit options win over the environment.
 *
 * @example
 * ```ts
 * const dataSource = await PromptDataSource.fromJsonl('prompts.jsonl', { nSamplesPerPrompt: 8 });
 * const scheduler = createRolloutScheduler('fully-async', { dataSource, generate }, {
 *   rolloutBatchSize: 32, nSamplesPerPrompt: 8, numRollout: 100,
 * });
 * const { samples, metrics } = await scheduler.generateRollout(0);
 * await scheduler.shutdown();
 * ```
 */
export function createRolloutScheduler(
  mode: RolloutMode,
  dependencies: SchedulerDependencies,
  options: SchedulerOptionsInput,
  env?: Readonly<Record<string, string | undefined>>,
): RolloutScheduler {
  const resolved = resolveSchedulerOptions(options, env ? { env } : {});
  if (mode === 'sync') return new SyncRolloutScheduler(dependencies, resolved);
  return new AsyncRolloutScheduler(mode, dependencies, resolved);
}
