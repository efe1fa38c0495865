import type { Sample } from '@dressage/protocol';
import type { RolloutDataSource } from './data-source.js';
import type { GenerateFunction, RolloutMode, SamplingParams, SchedulerLogger } from './generate.js';
import { cancelledError, type GroupOutcome, retryCountOf, runGroup } from './group-runner.js';

const emptySourceFirstDelayMs = 10;
const emptySourceMaxDelayMs = 1000;

/** A group the worker finished, waiting to be collected. */
export interface CompletedGroup {
  /** The worker's id of the submission (`dressage_async_group_id`). */
  asyncGroupId: number;
  /** The rollout that was current when the group was submitted. */
  submittedRolloutId: number;
  outcome: GroupOutcome;
}

/** Settings of an {@link AsyncRolloutWorker}. */
export interface AsyncRolloutWorkerOptions {
  dataSource: RolloutDataSource;
  generate: GenerateFunction;
  samplingParams: SamplingParams;
  mode: RolloutMode;
  /** Groups in flight at most. */
  maxActiveGroups: number;
  /** Completed groups held at most; dispatch pauses while the queue is at 80% or more. */
  outputQueueSize: number;
  logger: SchedulerLogger;
  /** Rewrites a group just before it is submitted (partial-async stamps its metadata). */
  prepare?: (group: Sample[], asyncGroupId: number, rolloutId: number) => Sample[];
  /** Called for groups cancelled by {@link AsyncRolloutWorker.stop} (their sessions can be discarded). */
  onCancelled?: (outcome: GroupOutcome) => void;
}

/**
 * The background half of the async schedulers: keeps up to `maxActiveGroups` groups in flight,
 * pulling one group at a time from the data source, and queues completed groups for the collector.
 * Everything is event driven (a completion or a collection tops the pipeline up), so an idle worker
 * holds no timer.
 */
export class AsyncRolloutWorker {
  private readonly active = new Map<number, { controller: AbortController; done: Promise<void> }>();
  private queue: CompletedGroup[] = [];
  private readonly listeners = new Set<() => void>();
  private filling: Promise<void> | null = null;
  private state: 'idle' | 'running' | 'stopped' = 'idle';
  private failure: unknown;
  private hasFailure = false;
  private nextGroupId = 0;
  // A source that ran dry is asked again after a growing delay, never in a tight loop.
  private emptyFetches = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  /** The rollout stamped on groups submitted from now on. */
  rolloutId = 0;

  constructor(private readonly options: AsyncRolloutWorkerOptions) {}

  /** Groups in flight. */
  get activeCount(): number {
    return this.active.size;
  }

  /** Completed groups waiting to be collected. */
  get queuedCount(): number {
    return this.queue.length;
  }

  /** True between {@link start} and {@link stop}. */
  get running(): boolean {
    return this.state === 'running';
  }

  /** Starts (or restarts after a stop) dispatching, stamping new groups with `rolloutId`. */
  start(rolloutId: number): void {
    this.rolloutId = rolloutId;
    this.state = 'running';
    this.pump();
  }

  /** Throws the error that stopped dispatching (a data source failure), if any. */
  throwIfFailed(): void {
    if (this.hasFailure) throw this.failure;
  }

  /** Takes up to `limit` completed groups, oldest first, and tops the pipeline up. */
  take(limit = Number.POSITIVE_INFINITY): CompletedGroup[] {
    const taken = this.queue.splice(0, limit);
    this.pump();
    return taken;
  }

  /** The completed groups waiting, oldest first, without taking them. */
  peek(): readonly CompletedGroup[] {
    return this.queue;
  }

  /** Puts completed groups back at the front of the queue (collected but not returned). */
  putBack(groups: readonly CompletedGroup[]): void {
    if (groups.length > 0) this.queue.unshift(...groups);
  }

  /** Resolves on the next completion, failure or stop; rejects with `cancelled` when `signal` aborts. */
  waitForChange(signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal.aborted) {
        reject(cancelledError('waiting for rollouts', signal.reason));
        return;
      }
      const onAbort = () => {
        this.listeners.delete(listener);
        reject(cancelledError('waiting for rollouts', signal.reason));
      };
      const listener = () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
      this.listeners.add(listener);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * Stops dispatching, cancels every group in flight and waits up to `timeoutMs` for them to settle.
   * Returns the completed groups nobody collected.
   */
  async stop(timeoutMs: number): Promise<CompletedGroup[]> {
    this.state = 'stopped';
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const reason = cancelledError('the rollout worker');
    const pending = [...this.active.values()];
    for (const { controller } of pending) controller.abort(reason);
    const settled = Promise.allSettled([
      ...pending.map(({ done }) => done),
      this.filling ?? Promise.resolve(),
    ]);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      settled.then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      this.options.logger.warn(
        `rollout worker stop timed out after ${timeoutMs} ms; ${this.active.size} group(s) still running`,
        { active: this.active.size },
      );
    }
    const leftovers = this.queue;
    this.queue = [];
    this.notify();
    return leftovers;
  }

  private canDispatch(): boolean {
    return (
      this.state === 'running' &&
      !this.hasFailure &&
      this.active.size < this.options.maxActiveGroups &&
      this.queue.length < 0.8 * this.options.outputQueueSize
    );
  }

  private pump(): void {
    if (this.filling !== null || this.retryTimer !== undefined || !this.canDispatch()) return;
    this.filling = this.fill().finally(() => {
      this.filling = null;
      // A completion may have arrived while the last fetch was finishing.
      if (this.canDispatch()) this.pump();
    });
  }

  private async fill(): Promise<void> {
    try {
      while (this.canDispatch()) {
        const [group] = await this.options.dataSource.getSamples(1);
        if (group === undefined) {
          this.backOff();
          return;
        }
        this.emptyFetches = 0;
        if (this.state !== 'running') {
          // Stopped while fetching: the group goes back, unstarted.
          this.options.dataSource.addSamples([group]);
          return;
        }
        this.launch(group);
      }
    } catch (error) {
      this.failure = error;
      this.hasFailure = true;
      this.notify();
    }
  }

  // An empty answer (a custom source running dry) would otherwise be asked again at once, forever,
  // in microtasks that starve every timer and socket: wait 10 ms, doubling up to 1 s (slime's
  // worker tops up once a second).
  private backOff(): void {
    const delay = Math.min(emptySourceMaxDelayMs, emptySourceFirstDelayMs * 2 ** this.emptyFetches);
    this.emptyFetches++;
    if (this.emptyFetches === 1) {
      this.options.logger.warn(
        `the data source returned no samples; asking again every ${emptySourceMaxDelayMs} ms at most`,
        { active: this.active.size, queued: this.queue.length },
      );
    }
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.pump();
    }, delay);
  }

  private launch(group: Sample[]): void {
    const asyncGroupId = this.nextGroupId++;
    const submittedRolloutId = this.rolloutId;
    const prepared = this.options.prepare?.(group, asyncGroupId, submittedRolloutId) ?? group;
    const controller = new AbortController();
    const done = runGroup(
      prepared,
      this.options.generate,
      this.options.samplingParams,
      { rolloutId: submittedRolloutId, attempt: retryCountOf(prepared), mode: this.options.mode },
      controller.signal,
    ).then((outcome) => {
      this.active.delete(asyncGroupId);
      if (outcome.cancelled) this.options.onCancelled?.(outcome);
      else this.queue.push({ asyncGroupId, submittedRolloutId, outcome });
      this.notify();
      this.pump();
    });
    this.active.set(asyncGroupId, { controller, done });
  }

  private notify(): void {
    const listeners = [...this.listeners];
    this.listeners.clear();
    for (const listener of listeners) listener();
  }
}
