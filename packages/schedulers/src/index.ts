// Public surface of @dressage/schedulers: the prompt data source, the generate contract and the
// three rollout schedulers with their options. The parts they are built from (the group runner,
// the async worker, staleness tracking, seeded shuffling) are in `@dressage/schedulers/internal`.

export {
  AsyncRolloutScheduler,
  createFullyAsyncRolloutScheduler,
  createPartialAsyncRolloutScheduler,
  PARTIAL_ROLLOUT_STALENESS_MARKER,
} from './async-rollout.js';
export { createRolloutScheduler } from './create-scheduler.js';
export {
  type DataSourceState,
  dataSourceStateFile,
  PromptDataSource,
  type PromptDataSourceOptions,
  type RolloutDataSource,
} from './data-source.js';
export {
  consoleLogger,
  type GenerateContext,
  type GenerateFunction,
  type GenerateResult,
  type MarkAbortedNoGrad,
  type MarkAbortedNoGradOptions,
  type RolloutMode,
  routeGenerateByPath,
  type SamplingParams,
  type SchedulerLogger,
  type SessionDiscarder,
} from './generate.js';
export {
  type ResolveOptionsSources,
  resolveSchedulerOptions,
  type SchedulerOptions,
  type SchedulerOptionsInput,
  schedulerEnvironmentVariables,
  schedulerOptionsFromEnv,
  schedulerOptionsSchema,
} from './options.js';
export {
  InMemoryPromptStore,
  JsonlPromptStore,
  type PromptStore,
  type StoredPromptRecord,
} from './prompt-store.js';
export type {
  RolloutCallOptions,
  RolloutResult,
  RolloutScheduler,
  SchedulerDependencies,
} from './scheduler.js';
export { createSyncRolloutScheduler, SyncRolloutScheduler } from './sync-rollout.js';
