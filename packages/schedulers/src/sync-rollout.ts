import { setMaxListeners } from 'node:events';
import { computeMultiSegmentMetrics } from '@dressage/multi-segment';
import { DressageError, type Sample } from '@dressage/protocol';
import { consoleLogger, type MarkAbortedNoGrad } from './generate.js';
import { defaultMarkAbortedNoGrad, incrementRetry, retryCountOf, sessionIdsOf } from './group-retry.js';
import { cancelledError, runGroup } from './group-runner.js';
import { resolveSchedulerOptions, type SchedulerOptions, type SchedulerOptionsInput } from './options.js';
import type {
  RolloutCallOptions,
  RolloutResult,
  RolloutScheduler,
  SchedulerDependencies,
} from './scheduler.js';
import { SessionJanitor } from './session-janitor.js';
import { assertTrainableBatch, sortGroupsByIndex } from './train-batch.js';

/**
 * The synchronous scheduler: takes exactly `rolloutBatchSize` groups, runs them all at once and
 * returns when every group is done. A failed group is resubmitted at once while retries remain;
 * after that it stays in the batch as no-gradient placeholders, so the batch is always complete.
 */
export class SyncRolloutScheduler implements RolloutScheduler {
  readonly mode = 'sync' as const;
  readonly options: SchedulerOptions;
  readonly #markAbortedNoGrad: MarkAbortedNoGrad;
  readonly #janitor: SessionJanitor;
  readonly #shutdownController = new AbortController();

  readonly #dependencies: SchedulerDependencies;

  constructor(dependencies: SchedulerDependencies, options: SchedulerOptions) {
    this.#dependencies = dependencies;
    this.options = options;
    this.#markAbortedNoGrad = dependencies.markAbortedNoGrad ?? defaultMarkAbortedNoGrad;
    this.#janitor = new SessionJanitor(dependencies.sessionDiscarder, dependencies.logger ?? consoleLogger);
  }

  async generateRollout(rolloutId: number, callOptions: RolloutCallOptions = {}): Promise<RolloutResult> {
    if (this.#shutdownController.signal.aborted) throw cancelledError('the sync scheduler');
    const { rolloutBatchSize } = this.options;
    const signal = callOptions.signal
      ? AbortSignal.any([callOptions.signal, this.#shutdownController.signal])
      : this.#shutdownController.signal;
    // Every group of the batch listens on this one signal; that is expected, not a leak.
    setMaxListeners(0, signal);
    const groups = await this.#dependencies.dataSource.getSamples(rolloutBatchSize);
    if (groups.length < rolloutBatchSize) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `the data source gave ${groups.length} groups; the sync rollout needs exactly ${rolloutBatchSize}`,
        details: { got: groups.length, expected: rolloutBatchSize },
      });
    }
    let retriedGroups = 0;
    let failedGroups = 0;
    const results = await Promise.all(
      groups.map(async (initial) => {
        let group = initial;
        for (;;) {
          const attempt = retryCountOf(group);
          const outcome = await runGroup(
            group,
            this.#dependencies.generate,
            this.options.samplingParams,
            { rolloutId, attempt, mode: this.mode },
            signal,
          );
          if (!outcome.failed) return outcome.samples;
          this.#janitor.discard(sessionIdsOf(outcome));
          if (outcome.cancelled) throw cancelledError(`rollout ${rolloutId}`, signal.reason);
          if (attempt < this.options.maxRetries) {
            retriedGroups++;
            group = outcome.group.map(incrementRetry);
            continue;
          }
          failedGroups++;
          return outcome.group.map((sample) => this.#placeholder(sample));
        }
      }),
    );
    const samples = sortGroupsByIndex(results);
    assertTrainableBatch(samples, this.options.allowEmptyTrainBatch);
    return {
      samples,
      metrics: {
        ...computeMultiSegmentMetrics(samples.flat()),
        'dressage/sync_rollout_retried_groups': retriedGroups,
        'dressage/sync_rollout_failed_groups': failedGroups,
      },
    };
  }

  async shutdown(): Promise<void> {
    this.#shutdownController.abort(cancelledError('the sync scheduler'));
    await this.#janitor.settle();
  }

  #placeholder(sample: Sample): Sample {
    return this.#markAbortedNoGrad(sample, {
      sessionId:
        typeof sample.metadata.session_id === 'string' ? sample.metadata.session_id : sample.session_id,
      instanceId: typeof sample.metadata.instance_id === 'string' ? sample.metadata.instance_id : null,
    });
  }
}

/** Builds a {@link SyncRolloutScheduler}; options are completed from the environment. */
export function createSyncRolloutScheduler(
  dependencies: SchedulerDependencies,
  options: SchedulerOptionsInput,
  env?: Readonly<Record<string, string | undefined>>,
): SyncRolloutScheduler {
  return new SyncRolloutScheduler(dependencies, resolveSchedulerOptions(options, env ? { env } : {}));
}
