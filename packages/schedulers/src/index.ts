// Public surface of @dressage/schedulers: the prompt data source, the generate contract and the
// three rollout schedulers with their options.

export {
  AsyncRolloutScheduler,
  createFullyAsyncRolloutScheduler,
  createPartialAsyncRolloutScheduler,
  PARTIAL_ROLLOUT_STALENESS_MARKER,
} from './async-rollout.js';
export { AsyncRolloutWorker, type AsyncRolloutWorkerOptions, type CompletedGroup } from './async-worker.js';
export { createRolloutScheduler } from './create-scheduler.js';
export {
  type DataSourceState,
  dataSourceStateFile,
  dataSourceStateSchema,
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
  assertTrainableBatch,
  defaultMarkAbortedNoGrad,
  type GroupOutcome,
  hasTrainableSample,
  incrementRetry,
  retryCountOf,
  runGroup,
  sessionIdsOf,
} from './group-runner.js';
export {
  type PartialRolloutTarget,
  partialRolloutTarget,
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
  type StoredRecord,
} from './prompt-store.js';
export type {
  RolloutCallOptions,
  RolloutResult,
  RolloutScheduler,
  SchedulerDependencies,
} from './scheduler.js';
export { createSeededRandom, seededPermutation } from './seeded-shuffle.js';
export {
  StalenessTracker,
  type TrajectoryVersion,
  trajectoryAnchors,
  trajectoryVersions,
} from './staleness.js';
export { createSyncRolloutScheduler, SyncRolloutScheduler } from './sync-rollout.js';
