// Building blocks of @dressage/schedulers for code that assembles a scheduler of its own: the
// group runner and its retry bookkeeping, the async worker, staleness tracking, the partial-rollout
// target, the data source's state schema and seeded shuffling. Not covered by the package's
// compatibility promise.

export {
  AsyncRolloutWorker,
  type AsyncRolloutWorkerOptions,
  type CompletedGroup,
  type InFlightGroup,
} from './async-worker.js';
export { dataSourceStateSchema } from './data-source.js';
export { defaultMarkAbortedNoGrad, incrementRetry, retryCountOf, sessionIdsOf } from './group-retry.js';
export { type GroupOutcome, GroupRun, type GroupRunListener, runGroup } from './group-runner.js';
export { type PartialRolloutTarget, partialRolloutTarget } from './options.js';
export { createSeededRandom, seededPermutation } from './seeded-shuffle.js';
export {
  StalenessTracker,
  type TrajectoryVersion,
  trajectoryAnchors,
  trajectoryVersions,
} from './staleness.js';
export { assertTrainableBatch, hasTrainableSample } from './train-batch.js';
