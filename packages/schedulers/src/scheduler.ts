import type { Sample } from '@dressage/protocol';
import type { RolloutDataSource } from './data-source.js';
import type {
  GenerateFunction,
  MarkAbortedNoGrad,
  RolloutMode,
  SchedulerLogger,
  SessionDiscarder,
} from './generate.js';

/** What a rollout call returns: groups sorted by their first sample's `index`, and metrics. */
export interface RolloutResult {
  samples: Sample[][];
  metrics: Record<string, number>;
}

/** Options of one rollout call. */
export interface RolloutCallOptions {
  /** Cancels this call (not the background worker). */
  signal?: AbortSignal;
  /**
   * The weight version the trainer holds now (the one it will train this batch with). The async
   * schedulers' staleness control measures version gaps to it: with `stalenessKeepVersions` N,
   * a group that ended more than N − 1 versions before it is dropped, even if no rollout has
   * ended on it yet.
   */
  weightVersion?: string;
}

/** What every scheduler is built from. */
export interface SchedulerDependencies {
  dataSource: RolloutDataSource;
  generate: GenerateFunction;
  /** Forgets the proxy sessions of failed trajectories (the proxy client). Optional. */
  sessionDiscarder?: SessionDiscarder;
  /** Placeholder for samples whose retries are exhausted (sync). Defaults to a local implementation. */
  markAbortedNoGrad?: MarkAbortedNoGrad;
  /** Default: the console. */
  logger?: SchedulerLogger;
}

/** A rollout scheduler: one call per training step, and a shutdown that leaves nothing running. */
export interface RolloutScheduler {
  readonly mode: RolloutMode;
  /** Produces the groups of rollout `rolloutId`. */
  generateRollout(rolloutId: number, options?: RolloutCallOptions): Promise<RolloutResult>;
  /** Cancels everything in flight and releases every timer; later calls fail with `cancelled`. */
  shutdown(): Promise<void>;
}
