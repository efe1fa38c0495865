import type { Sample } from '@dressage/protocol';
import type { RolloutDataSource } from './data-source.js';
import type { GenerateFunction, RolloutMode, SamplingParams, SchedulerLogger } from './generate.js';
import { retryCountOf } from './group-retry.js';
import { cancelledError, type GroupOutcome, GroupRun } from './group-runner.js';

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
  /**
   * Generate calls running at once at most, counted per sample: a group is started when all its
   * samples fit, and each finished sample frees its place even while its siblings still run.
   * Unset: only `maxActiveGroups` limits dispatch.
   */
  maxActiveSamples?: number;
  /** Groups in flight plus completed groups waiting, at most. Unset: no limit of its own. */
  maxOutstandingGroups?: number;
  /** Completed groups held at most; dispatch pauses while the queue is at 80% or more. */
  outputQueueSize: number;
  logger: SchedulerLogger;
  /** Rewrites a group just before it is submitted (partial-async stamps its metadata). */
  prepare?: (group: Sample[], asyncGroupId: number, rolloutId: number) => Sample[];
  /** Called for groups cancelled by {@link AsyncRolloutWorker.stop} (their sessions can be discarded). */
  onCancelled?: (outcome: GroupOutcome) => void;
  /** Called for groups stopped by {@link AsyncRolloutWorker.recall} once they have settled. */
  onRecalled?: (outcome: GroupOutcome) => void;
}

/** A group in flight as the collector sees it. */
export interface InFlightGroup {
  asyncGroupId: number;
  /** Its calls in flight and the samples of those that have finished. */
  run: GroupRun;
}

interface ActiveGroup {
  controller: AbortController;
  run: GroupRun;
  done: Promise<void>;
  recalled: boolean;
}

/**
 * The background half of the async schedulers: keeps up to `maxActiveGroups` groups in flight,
 * pulling one group at a time from the data source, and queues completed groups for the collector.
 * Everything is event driven (a completion or a collection tops the pipeline up), so an idle worker
 * holds no timer.
 */
export class AsyncRolloutWorker {
  readonly #active = new Map<number, ActiveGroup>();
  #runningSamples = 0;
  // A fetched group waiting for room under `maxActiveSamples`.
  #held: Sample[] | null = null;
  #queue: CompletedGroup[] = [];
  readonly #listeners = new Set<() => void>();
  #filling: Promise<void> | null = null;
  #state: 'idle' | 'running' | 'stopped' = 'idle';
  #failure: unknown;
  #hasFailure = false;
  #nextGroupId = 0;
  // A source that ran dry is asked again after a growing delay, never in a tight loop.
  #emptyFetches = 0;
  #retryTimer: NodeJS.Timeout | undefined;
  /** The rollout stamped on groups submitted from now on. */
  rolloutId = 0;

  readonly #options: AsyncRolloutWorkerOptions;

  constructor(options: AsyncRolloutWorkerOptions) {
    this.#options = options;
  }

  /** Groups in flight. */
  get activeCount(): number {
    return this.#active.size;
  }

  /** Generate calls running now (samples of groups in flight that have not finished). */
  get activeSampleCount(): number {
    return this.#runningSamples;
  }

  /** Groups in flight (not recalled), oldest first. */
  inFlight(): InFlightGroup[] {
    const groups: InFlightGroup[] = [];
    for (const [asyncGroupId, group] of this.#active)
      if (!group.recalled) groups.push({ asyncGroupId, run: group.run });
    return groups;
  }

  /**
   * Stops one group in flight whose result could not be used: its calls are aborted, and once they
   * have settled its outcome goes to `onRecalled` instead of the queue (never to a batch).
   */
  recall(asyncGroupId: number, reason: unknown): void {
    const group = this.#active.get(asyncGroupId);
    if (group === undefined || group.recalled) return;
    group.recalled = true;
    group.controller.abort(reason);
  }

  /** Completed groups waiting to be collected. */
  get queuedCount(): number {
    return this.#queue.length;
  }

  /** True between {@link start} and {@link stop}. */
  get running(): boolean {
    return this.#state === 'running';
  }

  /** Starts (or restarts after a stop) dispatching, stamping new groups with `rolloutId`. */
  start(rolloutId: number): void {
    this.rolloutId = rolloutId;
    this.#state = 'running';
    this.#pump();
  }

  /** Throws the error that stopped dispatching (a data source failure), if any. */
  throwIfFailed(): void {
    if (this.#hasFailure) throw this.#failure;
  }

  /** Takes up to `limit` completed groups, oldest first, and tops the pipeline up. */
  take(limit = Number.POSITIVE_INFINITY): CompletedGroup[] {
    const taken = this.#queue.splice(0, limit);
    this.#pump();
    return taken;
  }

  /** The completed groups waiting, oldest first, without taking them. */
  peek(): readonly CompletedGroup[] {
    return this.#queue;
  }

  /** Removes the completed groups `reject` returns true for, and tops the pipeline up. */
  discardQueued(reject: (entry: CompletedGroup) => boolean): CompletedGroup[] {
    const removed = this.#queue.filter(reject);
    if (removed.length > 0) {
      this.#queue = this.#queue.filter((entry) => !reject(entry));
      this.#pump();
    }
    return removed;
  }

  /** Puts completed groups back at the front of the queue (collected but not returned). */
  putBack(groups: readonly CompletedGroup[]): void {
    if (groups.length > 0) this.#queue.unshift(...groups);
  }

  /** Resolves on the next completion, failure or stop; rejects with `cancelled` when `signal` aborts. */
  waitForChange(signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal.aborted) {
        reject(cancelledError('waiting for rollouts', signal.reason));
        return;
      }
      const onAbort = () => {
        this.#listeners.delete(listener);
        reject(cancelledError('waiting for rollouts', signal.reason));
      };
      const listener = () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
      this.#listeners.add(listener);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * Stops dispatching, cancels every group in flight and waits up to `timeoutMs` for them to settle.
   * Returns the completed groups nobody collected.
   */
  async stop(timeoutMs: number): Promise<CompletedGroup[]> {
    this.#state = 'stopped';
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    const reason = cancelledError('the rollout worker');
    const pending = [...this.#active.values()];
    for (const { controller } of pending) controller.abort(reason);
    const settled = Promise.allSettled([
      ...pending.map(({ done }) => done),
      this.#filling ?? Promise.resolve(),
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
      this.#options.logger.warn(
        `rollout worker stop timed out after ${timeoutMs} ms; ${this.#active.size} group(s) still running`,
        { active: this.#active.size },
      );
    }
    if (this.#held !== null) {
      // Fetched but never started: back to the source, unstarted.
      this.#options.dataSource.addSamples([this.#held]);
      this.#held = null;
    }
    const leftovers = this.#queue;
    this.#queue = [];
    this.#notify();
    return leftovers;
  }

  #canDispatch(): boolean {
    return (
      this.#state === 'running' &&
      !this.#hasFailure &&
      this.#held === null &&
      this.#active.size < this.#options.maxActiveGroups &&
      this.#active.size + this.#queue.length <
        (this.#options.maxOutstandingGroups ?? Number.POSITIVE_INFINITY) &&
      this.#queue.length < 0.8 * this.#options.outputQueueSize
    );
  }

  // A group larger than the whole sample budget still runs, alone.
  #fits(group: readonly Sample[]): boolean {
    const limit = this.#options.maxActiveSamples;
    return limit === undefined || this.#runningSamples === 0 || this.#runningSamples + group.length <= limit;
  }

  #pump(): void {
    if (this.#held !== null && this.#state === 'running' && this.#fits(this.#held)) {
      const group = this.#held;
      this.#held = null;
      this.#launch(group);
    }
    if (this.#filling !== null || this.#retryTimer !== undefined || !this.#canDispatch()) return;
    this.#filling = this.#fill().finally(() => {
      this.#filling = null;
      // A completion may have arrived while the last fetch was finishing.
      if (this.#canDispatch()) this.#pump();
    });
  }

  async #fill(): Promise<void> {
    try {
      while (this.#canDispatch()) {
        const [group] = await this.#options.dataSource.getSamples(1);
        if (group === undefined) {
          this.#backOff();
          return;
        }
        this.#emptyFetches = 0;
        if (this.#state !== 'running') {
          // Stopped while fetching: the group goes back, unstarted.
          this.#options.dataSource.addSamples([group]);
          return;
        }
        if (!this.#fits(group)) {
          this.#held = group;
          return;
        }
        this.#launch(group);
      }
    } catch (error) {
      this.#failure = error;
      this.#hasFailure = true;
      this.#notify();
    }
  }

  // An empty answer (a custom source running dry) would otherwise be asked again at once, forever,
  // in microtasks that starve every timer and socket: wait 10 ms, doubling up to 1 s (slime's
  // worker tops up once a second).
  #backOff(): void {
    const delay = Math.min(emptySourceMaxDelayMs, emptySourceFirstDelayMs * 2 ** this.#emptyFetches);
    this.#emptyFetches++;
    if (this.#emptyFetches === 1) {
      this.#options.logger.warn(
        `the data source returned no samples; asking again every ${emptySourceMaxDelayMs} ms at most`,
        { active: this.#active.size, queued: this.#queue.length },
      );
    }
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      this.#pump();
    }, delay);
  }

  #launch(group: Sample[]): void {
    const asyncGroupId = this.#nextGroupId++;
    const submittedRolloutId = this.rolloutId;
    const prepared = this.#options.prepare?.(group, asyncGroupId, submittedRolloutId) ?? group;
    const controller = new AbortController();
    const run = new GroupRun(
      prepared,
      this.#options.generate,
      this.#options.samplingParams,
      { rolloutId: submittedRolloutId, attempt: retryCountOf(prepared), mode: this.#options.mode },
      controller.signal,
      {
        started: () => {
          this.#runningSamples++;
        },
        settled: () => {
          this.#runningSamples--;
          // A finished sample frees its place under the sample budget at once.
          if (this.#options.maxActiveSamples !== undefined) this.#pump();
        },
      },
    );
    const entry: ActiveGroup = { controller, run, done: Promise.resolve(), recalled: false };
    this.#active.set(asyncGroupId, entry);
    entry.done = run.done.then((outcome) => {
      this.#active.delete(asyncGroupId);
      if (entry.recalled) this.#options.onRecalled?.(outcome);
      else if (outcome.cancelled) this.#options.onCancelled?.(outcome);
      else this.#queue.push({ asyncGroupId, submittedRolloutId, outcome });
      this.#notify();
      this.#pump();
    });
  }

  #notify(): void {
    const listeners = [...this.#listeners];
    this.#listeners.clear();
    for (const listener of listeners) listener();
  }
}
