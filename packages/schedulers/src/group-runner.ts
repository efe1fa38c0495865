import { markAbortedNoGrad } from '@dressage/multi-segment';
import { DressageError, type Sample, SampleStatus } from '@dressage/protocol';
import type {
  GenerateContext,
  GenerateFunction,
  GenerateResult,
  MarkAbortedNoGrad,
  SamplingParams,
  SchedulerLogger,
  SessionDiscarder,
} from './generate.js';

/** The result of running one prompt group. */
export interface GroupOutcome {
  /** The group as submitted (generate may have filled these samples in place). */
  group: Sample[];
  /** Every sample the generate calls returned, flattened, in group order. */
  samples: Sample[];
  /** True when a call threw, returned nothing, or returned an `aborted` sample. */
  failed: boolean;
  /** The first error thrown, if any. */
  error?: unknown;
  /** True when the group was cancelled by the scheduler rather than failing by itself. */
  cancelled: boolean;
}

function flatten(result: GenerateResult): Sample[] {
  if (result === null || result === undefined) return [];
  if (!Array.isArray(result)) return [result as Sample];
  const out: Sample[] = [];
  for (const item of result as readonly (Sample | readonly Sample[])[]) {
    if (Array.isArray(item)) out.push(...(item as Sample[]));
    else out.push(item as Sample);
  }
  return out;
}

/** Hears of a group's generate calls as they start and settle. */
export interface GroupRunListener {
  started?(): void;
  /** The call's samples, or `null` when it threw. */
  settled?(samples: readonly Sample[] | null): void;
}

/**
 * One prompt group in flight: `generate` runs on every sample at once. The first failure aborts the
 * siblings (the group is lost anyway), and {@link GroupRun.done} waits for every call to settle so
 * no work outlives it. While the group runs, the samples of its finished calls can be read
 * ({@link GroupRun.finishedSamples}): the async worker judges a group's staleness before it ends.
 */
export class GroupRun {
  /** Settles once every call has, with the group's outcome. */
  readonly done: Promise<GroupOutcome>;
  // Per sample: what its call returned (empty when it threw); `null` while it runs.
  readonly #results: (Sample[] | null)[];
  readonly #controller = new AbortController();
  readonly #forward: () => void;
  #running = 0;
  #failed = false;
  #firstError: unknown;
  #settle!: (outcome: GroupOutcome) => void;

  readonly #group: Sample[];
  readonly #generate: GenerateFunction;
  readonly #samplingParams: SamplingParams;
  readonly #context: Omit<GenerateContext, 'signal'>;
  readonly #signal: AbortSignal;
  readonly #listener: GroupRunListener;

  constructor(
    group: Sample[],
    generate: GenerateFunction,
    samplingParams: SamplingParams,
    context: Omit<GenerateContext, 'signal'>,
    signal: AbortSignal,
    listener: GroupRunListener = {},
  ) {
    this.#group = group;
    this.#generate = generate;
    this.#samplingParams = samplingParams;
    this.#context = context;
    this.#signal = signal;
    this.#listener = listener;
    this.done = new Promise((resolve) => {
      this.#settle = resolve;
    });
    this.#forward = () => this.#controller.abort(signal.reason);
    if (signal.aborted) this.#forward();
    else signal.addEventListener('abort', this.#forward, { once: true });
    this.#results = group.map(() => null);
    this.#running = group.length;
    for (const [position, sample] of group.entries()) {
      this.#listener.started?.();
      void this.#call(position, sample);
    }
    if (group.length === 0) this.#finish();
  }

  /** Samples of the calls that have finished so far, in group order. */
  finishedSamples(): Sample[] {
    return this.#results.flatMap((result) => result ?? []);
  }

  async #call(position: number, sample: Sample): Promise<void> {
    try {
      const result = flatten(
        await this.#generate(sample, this.#samplingParams, {
          ...this.#context,
          signal: this.#controller.signal,
        }),
      );
      if (result.length === 0 || result.some((item) => item.status === SampleStatus.ABORTED)) {
        this.#failed = true;
        this.#controller.abort(new DressageError({ code: 'aborted', message: 'a sibling sample failed' }));
      }
      this.#results[position] = result;
      this.#listener.settled?.(result);
    } catch (error) {
      this.#results[position] = [];
      this.#listener.settled?.(null);
      if (!this.#failed) this.#firstError = error;
      this.#failed = true;
      this.#controller.abort(new DressageError({ code: 'aborted', message: 'a sibling sample failed' }));
    }
    this.#running--;
    if (this.#running === 0) this.#finish();
  }

  #finish(): void {
    this.#signal.removeEventListener('abort', this.#forward);
    const cancelled = this.#signal.aborted;
    const outcome: GroupOutcome = {
      group: this.#group,
      samples: this.finishedSamples(),
      failed: this.#failed || cancelled,
      cancelled,
    };
    if (this.#firstError !== undefined) outcome.error = this.#firstError;
    else if (cancelled) outcome.error = this.#signal.reason;
    this.#settle(outcome);
  }
}

/**
 * Runs `generate` on every sample of a group at once (a {@link GroupRun} nobody watches). The first
 * failure aborts the siblings, and the outcome waits for every call to settle.
 */
export function runGroup(
  group: Sample[],
  generate: GenerateFunction,
  samplingParams: SamplingParams,
  context: Omit<GenerateContext, 'signal'>,
  signal: AbortSignal,
): Promise<GroupOutcome> {
  return new GroupRun(group, generate, samplingParams, context, signal).done;
}

function nonEmpty(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

/** The retry count of a group: its first sample's `metadata.dressage_retry_count` (0 when unset). */
export function retryCountOf(group: readonly Sample[]): number {
  const count = group[0]?.metadata.dressage_retry_count;
  return typeof count === 'number' && Number.isFinite(count) ? count : 0;
}

/**
 * Prepares a sample for another try: the failed attempt's session moves to
 * `metadata.last_retry_session_id`; `session_id`, `parent_traj_id` and `segment_index` are removed;
 * `dressage_retry_count` goes up by one and `remove_sample` is cleared. Returns a new sample.
 */
export function incrementRetry(sample: Sample): Sample {
  const metadata = structuredClone(sample.metadata);
  const session = nonEmpty(metadata.session_id) ?? nonEmpty(sample.session_id);
  if (session !== null) metadata.last_retry_session_id = session;
  delete metadata.session_id;
  delete metadata.parent_traj_id;
  delete metadata.segment_index;
  const count = typeof metadata.dressage_retry_count === 'number' ? metadata.dressage_retry_count : 0;
  metadata.dressage_retry_count = count + 1;
  return { ...sample, metadata, session_id: null, remove_sample: false };
}

/**
 * The default placeholder for a sample whose retries are exhausted (the multi-segment package's
 * `markAbortedNoGrad` is the full version and can be injected instead): excluded from training,
 * status `failed`, reward 0, no response; ids fall back to the sample's own session and instance
 * before a hash of the sample. Returns a new sample.
 */
export const defaultMarkAbortedNoGrad: MarkAbortedNoGrad = (sample, options) =>
  markAbortedNoGrad(sample, options);

/** The proxy sessions a failed group touched: sessions of the submitted and returned samples. */
export function sessionIdsOf(outcome: Pick<GroupOutcome, 'group' | 'samples'>): string[] {
  const ids = new Set<string>();
  for (const sample of [...outcome.group, ...outcome.samples]) {
    const fromMetadata = nonEmpty(sample.metadata.session_id);
    if (fromMetadata !== null) ids.add(fromMetadata);
    const own = nonEmpty(sample.session_id);
    if (own !== null) ids.add(own);
  }
  return [...ids];
}

/**
 * Discards sessions in the background and remembers the pending calls so a shutdown can wait for
 * them. A failing discard is logged, never thrown: the rollout does not depend on it.
 */
export class SessionJanitor {
  readonly #pending = new Set<Promise<void>>();
  discarded = 0;

  readonly #discarder: SessionDiscarder | undefined;
  readonly #logger: SchedulerLogger;

  constructor(discarder: SessionDiscarder | undefined, logger: SchedulerLogger) {
    this.#discarder = discarder;
    this.#logger = logger;
  }

  discard(sessionIds: readonly string[]): void {
    if (this.#discarder === undefined) return;
    for (const sessionId of sessionIds) {
      const call = Promise.resolve()
        .then(() => this.#discarder?.discardSession(sessionId))
        .then(
          () => {
            this.discarded++;
          },
          (error: unknown) => {
            this.#logger.warn(`could not discard proxy session ${sessionId}`, {
              sessionId,
              error: error instanceof Error ? error.message : String(error),
            });
          },
        )
        .finally(() => this.#pending.delete(call));
      this.#pending.add(call);
    }
  }

  /** Resolves once every discard started so far has settled. */
  async settle(): Promise<void> {
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }
}

/**
 * True when a batch holds at least one sample that trains something: kept, with a response, and with
 * a loss mask that is missing (all ones) or has a 1.
 */
export function hasTrainableSample(groups: readonly (readonly Sample[])[]): boolean {
  return groups.some((group) =>
    group.some(
      (sample) =>
        !sample.remove_sample &&
        sample.response_length > 0 &&
        (sample.loss_mask === null || sample.loss_mask.some((value) => value !== 0)),
    ),
  );
}

/** Throws the empty-train-batch error unless allowed. */
export function assertTrainableBatch(groups: readonly (readonly Sample[])[], allowEmpty: boolean): void {
  if (allowEmpty || hasTrainableSample(groups)) return;
  throw new DressageError({
    code: 'failed_precondition',
    message:
      `rollout produced no trainable samples (${groups.length} groups, none with a kept sample that has ` +
      'a response and a non-zero loss mask); set DRESSAGE_ALLOW_EMPTY_TRAIN_BATCH=1 to train on it anyway',
    details: { groups: groups.length },
  });
}

/** Sorts groups by their first sample's `index` (the reference's output order). */
export function sortGroupsByIndex<T extends { readonly index: number | null }>(groups: T[][]): T[][] {
  return groups.sort(
    (a, b) => (a[0]?.index ?? Number.MAX_SAFE_INTEGER) - (b[0]?.index ?? Number.MAX_SAFE_INTEGER),
  );
}

/** A DressageError for work stopped by a cancel or a shutdown. */
export function cancelledError(what: string, cause?: unknown): DressageError {
  return new DressageError({ code: 'cancelled', message: `${what} was cancelled`, cause });
}
