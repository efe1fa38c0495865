import { DressageError, type Sample, SampleStatus } from '@dressage/protocol';
import type { GenerateContext, GenerateFunction, GenerateResult, SamplingParams } from './generate.js';

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

/** A DressageError for work stopped by a cancel or a shutdown. */
export function cancelledError(what: string, cause?: unknown): DressageError {
  return new DressageError({ code: 'cancelled', message: `${what} was cancelled`, cause });
}
