import { computeMultiSegmentMetrics } from '@dressage/multi-segment';
import { DressageError, type Sample } from '@dressage/protocol';
import { AsyncRolloutWorker, type CompletedGroup } from './async-worker.js';
import { consoleLogger, type SchedulerLogger } from './generate.js';
import { incrementRetry, retryCountOf, sessionIdsOf } from './group-retry.js';
import { cancelledError, type GroupOutcome } from './group-runner.js';
import {
  partialRolloutTarget,
  resolveSchedulerOptions,
  type SchedulerOptions,
  type SchedulerOptionsInput,
} from './options.js';
import type {
  RolloutCallOptions,
  RolloutResult,
  RolloutScheduler,
  SchedulerDependencies,
} from './scheduler.js';
import { SessionJanitor } from './session-janitor.js';
import { StalenessTracker } from './staleness.js';
import { assertTrainableBatch, sortGroupsByIndex } from './train-batch.js';

/** The marker a proxy puts in an error or metadata when a partial rollout spans too many versions. */
export const PARTIAL_ROLLOUT_STALENESS_MARKER = 'partial_rollout_staleness_exceeded';

function mentionsStalenessRejection(outcome: GroupOutcome): boolean {
  const error = outcome.error;
  const message = error instanceof Error ? error.message : error === undefined ? '' : String(error);
  if (message.includes(PARTIAL_ROLLOUT_STALENESS_MARKER)) return true;
  return [...outcome.group, ...outcome.samples].some((sample) =>
    JSON.stringify(sample.metadata).includes(PARTIAL_ROLLOUT_STALENESS_MARKER),
  );
}

function withMetadata(sample: Sample, extra: Record<string, unknown>): Sample {
  return { ...sample, metadata: { ...sample.metadata, ...extra } };
}

/** What one collect call counts of the groups it saw. */
interface CollectCounters {
  retried: number;
  failed: number;
  dropped: number;
  staleDropped: number;
  rejectedGroups: number;
  rejectedSamples: number;
}

/**
 * The asynchronous schedulers. A background {@link AsyncRolloutWorker} keeps groups in flight across
 * calls; each call collects completed groups until its target is met:
 *
 * - `fully-async` returns `rolloutBatchSize` groups;
 * - `partial-async` returns the partial target (see {@link partialRolloutTarget}) and stamps
 *   `dressage_*` partial-rollout metadata on submitted and returned samples.
 *
 * Failed groups go back to the data source while retries remain and are dropped after that (too many
 * drops in one call fail it). Extra completed groups carry over to the next call. With
 * `stalenessKeepVersions`, groups whose trajectories ended on too old a weight version are dropped.
 * On the final rollout the worker is drained.
 */
export class AsyncRolloutScheduler implements RolloutScheduler {
  readonly options: SchedulerOptions;
  readonly #worker: AsyncRolloutWorker;
  readonly #tracker: StalenessTracker;
  readonly #janitor: SessionJanitor;
  readonly #logger: SchedulerLogger;
  readonly #shutdownController = new AbortController();
  #warnedTarget = false;
  #collecting = false;
  // Groups recalled in flight since the last call returned, reported by the next one.
  #recalled = { groups: 0, givenUp: 0 };

  readonly #dependencies: SchedulerDependencies;

  constructor(
    readonly mode: 'fully-async' | 'partial-async',
    dependencies: SchedulerDependencies,
    options: SchedulerOptions,
  ) {
    this.#dependencies = dependencies;
    this.options = options;
    this.#logger = dependencies.logger ?? consoleLogger;
    this.#janitor = new SessionJanitor(dependencies.sessionDiscarder, this.#logger);
    this.#tracker = new StalenessTracker(options.stalenessKeepVersions);
    this.#worker = new AsyncRolloutWorker({
      dataSource: dependencies.dataSource,
      generate: dependencies.generate,
      samplingParams: options.samplingParams,
      mode,
      maxActiveGroups:
        options.asyncMaxActiveGroups ??
        (options.asyncMaxActiveSamples === undefined ? options.rolloutBatchSize : Number.POSITIVE_INFINITY),
      ...(options.asyncMaxActiveSamples === undefined
        ? {}
        : { maxActiveSamples: options.asyncMaxActiveSamples }),
      outputQueueSize: options.asyncOutputQueueSize,
      ...(options.asyncMaxOutstandingGroups === undefined
        ? {}
        : { maxOutstandingGroups: options.asyncMaxOutstandingGroups }),
      logger: this.#logger,
      onCancelled: (outcome) => this.#janitor.discard(sessionIdsOf(outcome)),
      onRecalled: (outcome) => this.#recycle(outcome),
      ...(mode === 'partial-async' ? { prepare: stampSubmitted } : {}),
    });
  }

  /** The staleness tracker (versions seen so far). */
  get staleness(): StalenessTracker {
    return this.#tracker;
  }

  /** Groups in flight, their calls running and completed groups waiting (dashboards, tests). */
  get pipeline(): { active: number; activeSamples: number; queued: number; running: boolean } {
    return {
      active: this.#worker.activeCount,
      activeSamples: this.#worker.activeSampleCount,
      queued: this.#worker.queuedCount,
      running: this.#worker.running,
    };
  }

  /** The number of groups one call returns. */
  targetGroups(): { groups: number; samples: number } {
    if (this.mode === 'fully-async') {
      const groups = this.options.rolloutBatchSize;
      return { groups, samples: groups * this.options.nSamplesPerPrompt };
    }
    const target = partialRolloutTarget(this.options);
    if (target.warning !== undefined && !this.#warnedTarget) {
      this.#warnedTarget = true;
      this.#logger.warn(target.warning);
    }
    return { groups: target.groups, samples: target.samples };
  }

  async generateRollout(rolloutId: number, callOptions: RolloutCallOptions = {}): Promise<RolloutResult> {
    if (this.#shutdownController.signal.aborted) throw cancelledError(`the ${this.mode} scheduler`);
    // Two collectors would split the worker's output between them; one call at a time.
    if (this.#collecting) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `the ${this.mode} scheduler is already collecting a rollout; await it before the next call`,
      });
    }
    this.#collecting = true;
    try {
      return await this.#collect(rolloutId, callOptions);
    } finally {
      this.#collecting = false;
    }
  }

  async #collect(rolloutId: number, callOptions: RolloutCallOptions): Promise<RolloutResult> {
    const signal = callOptions.signal
      ? AbortSignal.any([callOptions.signal, this.#shutdownController.signal])
      : this.#shutdownController.signal;
    const target = this.targetGroups();
    const maxDropped = this.options.asyncMaxDroppedFailedGroups ?? Math.max(target.groups * 10, 100);
    const counters: CollectCounters = {
      retried: 0,
      failed: 0,
      dropped: 0,
      staleDropped: 0,
      rejectedGroups: 0,
      rejectedSamples: 0,
    };
    let batch: CompletedGroup[] = [];
    let unprocessed: CompletedGroup[] = [];
    if (callOptions.weightVersion !== undefined && this.#tracker.observeVersion(callOptions.weightVersion))
      this.#recallStale(0);

    this.#worker.start(rolloutId);
    const warnAfterMs = this.options.asyncNoProgressWarnSec * 1000;
    let lastProgress = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        this.#logger.warn(
          `${this.mode} rollout ${rolloutId}: no group completed for ${Math.round((Date.now() - lastProgress) / 1000)} s ` +
            `(${batch.length}/${target.groups} collected, ${this.#worker.activeCount} in flight)`,
          { rolloutId, collected: batch.length, target: target.groups, active: this.#worker.activeCount },
        );
        arm();
      }, warnAfterMs);
    };
    arm();
    try {
      while (batch.length < target.groups) {
        this.#worker.throwIfFailed();
        // Take only what the batch still needs; the rest stays queued (and counts for backpressure).
        const completed = this.#worker.take(target.groups - batch.length);
        if (completed.length === 0) {
          await this.#worker.waitForChange(signal);
          continue;
        }
        lastProgress = Date.now();
        arm();
        // A pass observes every completed group (also those left queued), so the batch is judged
        // against the newest weights known; groups that failed say nothing final and are skipped.
        let advanced = false;
        for (const entry of [...completed, ...this.#worker.peek()]) {
          if (!entry.outcome.failed) advanced = this.#tracker.observe(entry.outcome.samples) || advanced;
        }
        if (advanced) {
          const kept = batch.filter((pending) => !this.#tracker.isStale(pending.outcome.samples));
          counters.staleDropped += batch.length - kept.length;
          batch = kept;
          this.#recallStale(0);
        }
        unprocessed = completed;
        while (unprocessed.length > 0) {
          const entry = unprocessed.shift() as CompletedGroup;
          if (entry.outcome.failed) {
            this.#handleFailure(entry, counters);
            if (counters.dropped > maxDropped) {
              throw new DressageError({
                code: 'resource_exhausted',
                isRetryable: false,
                message:
                  `${this.mode} rollout ${rolloutId} dropped ${counters.dropped} failed groups (limit ` +
                  `${maxDropped}, DRESSAGE_ASYNC_MAX_DROPPED_FAILED_GROUPS); the rollouts keep failing`,
                details: { rolloutId, dropped: counters.dropped, limit: maxDropped },
              });
            }
            continue;
          }
          if (this.#tracker.isStale(entry.outcome.samples)) {
            counters.staleDropped++;
            continue;
          }
          batch.push(entry);
        }
      }
    } catch (error) {
      // Nothing collected is wasted: a cancelled or failed call leaves its groups for the next one.
      this.#worker.putBack([...batch, ...unprocessed]);
      throw error;
    } finally {
      clearTimeout(timer);
    }
    return this.#finish(rolloutId, batch, counters, target);
  }

  // The rollout's answer once its batch is full: groups still in flight are recalled (stale after the
  // next update), the worker drained on the final rollout when told, and the metrics counted.
  async #finish(
    rolloutId: number,
    batch: CompletedGroup[],
    counters: CollectCounters,
    target: { groups: number; samples: number },
  ): Promise<RolloutResult> {
    // The batch is full: a group still in flight can only be trained after the next weight update.
    this.#recallStale(1);
    counters.staleDropped += this.#recalled.givenUp;
    const recalledGroups = this.#recalled.groups;
    this.#recalled = { groups: 0, givenUp: 0 };
    this.#tracker.droppedGroups += counters.staleDropped;

    const isFinal = this.options.numRollout !== undefined && rolloutId + 1 >= this.options.numRollout;
    const drain =
      isFinal &&
      (this.mode === 'fully-async'
        ? this.options.drainFullyAsyncWorkerOnFinalRollout
        : this.options.drainPartialWorkerOnFinalRollout);
    const queuedCompleted = this.#worker.queuedCount;
    let drainedCompleted = 0;
    if (drain) {
      const leftovers = await this.#worker.stop(this.options.asyncWorkerStopTimeoutSec * 1000);
      drainedCompleted = leftovers.length;
    }

    const groups = sortGroupsByIndex(
      batch.map((entry) =>
        this.mode === 'partial-async'
          ? entry.outcome.samples.map((sample) =>
              withMetadata(sample, {
                dressage_return_rollout_id: rolloutId,
                dressage_return_async_group_id: entry.asyncGroupId,
                dressage_partial_rollout_returned: true,
              }),
            )
          : entry.outcome.samples,
      ),
    );
    assertTrainableBatch(groups, this.options.allowEmptyTrainBatch);

    const prefix = this.mode === 'partial-async' ? 'dressage/partial_rollout_' : 'dressage/fully_async_';
    const metrics: Record<string, number> = {
      ...computeMultiSegmentMetrics(groups.flat()),
      ...this.#tracker.metrics(groups, counters.staleDropped),
      ...(this.#tracker.enabled ? { 'staleness/recalled_groups': recalledGroups } : {}),
      [`${prefix}target_groups`]: target.groups,
      [`${prefix}target_samples`]: target.samples,
      [`${prefix}full_groups`]: this.options.rolloutBatchSize,
      [`${prefix}full_samples`]: this.options.rolloutBatchSize * this.options.nSamplesPerPrompt,
      [`${prefix}returned_groups`]: groups.length,
      [`${prefix}returned_samples`]: groups.reduce((sum, group) => sum + group.length, 0),
      [`${prefix}retried_groups`]: counters.retried,
      [`${prefix}failed_groups`]: counters.failed,
      [`${prefix}dropped_failed_groups`]: counters.dropped,
      [`${prefix}queued_completed_groups`]: queuedCompleted,
      [`${prefix}final_worker_drain`]: drain ? 1 : 0,
      [`${prefix}drained_completed_groups`]: drainedCompleted,
    };
    if (this.mode === 'partial-async') {
      metrics['staleness/partial_rollout_rejected_groups'] = counters.rejectedGroups;
      metrics['staleness/partial_rollout_rejected_samples'] = counters.rejectedSamples;
    }
    return { samples: groups, metrics };
  }

  async shutdown(): Promise<void> {
    this.#shutdownController.abort(cancelledError(`the ${this.mode} scheduler`));
    await this.#worker.stop(this.options.asyncWorkerStopTimeoutSec * 1000);
    await this.#janitor.settle();
  }

  /**
   * Recalls every group in flight that a finished sample already rules out: one of its trajectories
   * ended on a version that is outside the kept window now (`versionsAhead` 0) or will be once the
   * trainer holds `versionsAhead` newer versions. Finishing it would only produce a group to drop.
   */
  #recallStale(versionsAhead: number): void {
    if (!this.#tracker.enabled || !this.options.stalenessRecallInFlight) return;
    // Completed groups that will be stale when collected leave the queue now, making room.
    if (versionsAhead > 0) {
      const stale = this.#worker.discardQueued(
        (entry) => !entry.outcome.failed && this.#tracker.isStale(entry.outcome.samples, versionsAhead),
      );
      this.#recalled.givenUp += stale.length;
    }
    for (const { asyncGroupId, run } of this.#worker.inFlight()) {
      const finished = run.finishedSamples();
      if (finished.length === 0 || !this.#tracker.isStale(finished, versionsAhead)) continue;
      this.#worker.recall(
        asyncGroupId,
        new DressageError({
          code: 'aborted',
          message: 'a finished sample of the group is older than the staleness bound',
        }),
      );
    }
  }

  // A recalled group's prompt goes back to the data source (as a failed group's would) while
  // retries remain; its sessions are discarded either way.
  #recycle(outcome: GroupOutcome): void {
    this.#janitor.discard(sessionIdsOf(outcome));
    this.#recalled.groups++;
    if (retryCountOf(outcome.group) < this.options.maxRetries) {
      this.#dependencies.dataSource.addSamples([outcome.group.map(incrementRetry)]);
    } else {
      this.#recalled.givenUp++;
    }
  }

  #handleFailure(
    entry: CompletedGroup,
    counters: {
      retried: number;
      failed: number;
      dropped: number;
      rejectedGroups: number;
      rejectedSamples: number;
    },
  ): void {
    const { outcome } = entry;
    counters.failed++;
    if (this.mode === 'partial-async' && mentionsStalenessRejection(outcome)) {
      counters.rejectedGroups++;
      counters.rejectedSamples += outcome.group.length;
    }
    this.#janitor.discard(sessionIdsOf(outcome));
    if (retryCountOf(outcome.group) < this.options.maxRetries) {
      // A group that will be retried says nothing final about weight versions: it is not observed.
      counters.retried++;
      this.#dependencies.dataSource.addSamples([outcome.group.map(incrementRetry)]);
      return;
    }
    counters.dropped++;
    this.#tracker.observe(outcome.samples);
    this.#logger.warn(
      `dropping group ${outcome.group[0]?.group_index ?? '?'} after ${this.options.maxRetries} retries`,
      {
        group_index: outcome.group[0]?.group_index ?? null,
        error: outcome.error instanceof Error ? outcome.error.message : String(outcome.error ?? 'no result'),
      },
    );
  }
}

// Partial-async provenance: where a group started (set once, kept across retries) and which
// submission this is.
function stampSubmitted(group: Sample[], asyncGroupId: number, rolloutId: number): Sample[] {
  return group.map((sample) =>
    withMetadata(sample, {
      dressage_start_rollout_id: sample.metadata.dressage_start_rollout_id ?? rolloutId,
      dressage_async_group_id: asyncGroupId,
      dressage_partial_rollout: true,
    }),
  );
}

/** Builds the fully-async scheduler; options are completed from the environment. */
export function createFullyAsyncRolloutScheduler(
  dependencies: SchedulerDependencies,
  options: SchedulerOptionsInput,
  env?: Readonly<Record<string, string | undefined>>,
): AsyncRolloutScheduler {
  return new AsyncRolloutScheduler(
    'fully-async',
    dependencies,
    resolveSchedulerOptions(options, env ? { env } : {}),
  );
}

/** Builds the partial-async scheduler; options are completed from the environment. */
export function createPartialAsyncRolloutScheduler(
  dependencies: SchedulerDependencies,
  options: SchedulerOptionsInput,
  env?: Readonly<Record<string, string | undefined>>,
): AsyncRolloutScheduler {
  return new AsyncRolloutScheduler(
    'partial-async',
    dependencies,
    resolveSchedulerOptions(options, env ? { env } : {}),
  );
}
