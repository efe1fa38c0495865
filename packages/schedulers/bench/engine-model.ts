// The simulated world of the scheduler benchmark: a virtual clock, and an inference engine whose
// requests contend for it as they do on SGLang.
//
// SGLang runs continuous batching: every decode step advances each running request by one token, and
// a new request joins the running batch only while it holds fewer than `max_running_requests`
// (sgl-project/sglang, python/sglang/srt/managers/scheduler.py, `get_new_batch_prefill`: `if running_bs
// >= self.max_running_requests: ... batch_is_full = True; return None`); the others wait in its
// `waiting_queue`, first come first served. A decode step reads the weights once and the KV cache of
// every running request, so its time grows with the batch: here `stepSeconds + perRequestSeconds ×
// running`. One request alone decodes at 1 / stepSeconds tokens/s; the engine's throughput is bounded by
// 1 / perRequestSeconds tokens/s, shared by everything in flight.

/** A clock that only moves when every task is waiting on it. */
export class VirtualClock {
  now = 0;
  private heap: TimerEntry[] = [];
  private order = 0;

  /** Calls `fire` at time `at` (not before now); returns a function that cancels it. */
  schedule(at: number, fire: () => void): () => void {
    const entry: TimerEntry = { at: Math.max(at, this.now), order: this.order++, fire };
    this.push(entry);
    return () => {
      entry.fire = () => {};
    };
  }

  /** Resolves after `seconds` of virtual time; rejects with the signal's reason when it aborts. */
  sleep(seconds: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const onAbort = () => {
        cancel();
        reject(signal?.reason);
      };
      const cancel = this.schedule(this.now + seconds, () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      });
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Runs `main` to completion, advancing time whenever nothing else can happen. */
  async run<T>(main: Promise<T>): Promise<T> {
    let settled = false;
    const result = main.finally(() => {
      settled = true;
    });
    while (!settled) {
      await new Promise((resolve) => setImmediate(resolve));
      if (settled) break;
      const next = this.pop();
      if (next === undefined)
        throw new Error('simulation stalled: nothing scheduled and the run is not done');
      this.now = next.at;
      next.fire();
    }
    return result;
  }

  private push(entry: TimerEntry): void {
    const heap = this.heap;
    heap.push(entry);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(heap[i]!, heap[parent]!)) break;
      [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
      i = parent;
    }
  }

  private pop(): TimerEntry | undefined {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0 && last !== undefined) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < heap.length && before(heap[left]!, heap[smallest]!)) smallest = left;
        if (right < heap.length && before(heap[right]!, heap[smallest]!)) smallest = right;
        if (smallest === i) break;
        [heap[i], heap[smallest]] = [heap[smallest]!, heap[i]!];
        i = smallest;
      }
    }
    return top;
  }
}

interface TimerEntry {
  at: number;
  order: number;
  fire: () => void;
}

function before(a: TimerEntry, b: TimerEntry): boolean {
  return a.at < b.at || (a.at === b.at && a.order < b.order);
}

/** The engine's capacity, the same for every scheduler mode it serves. */
export interface EngineOptions {
  /** Requests decoded at once (SGLang's `max_running_requests`); the rest wait, first come first served. */
  slots: number;
  /** Time of one decode step with one request running, in seconds. */
  stepSeconds: number;
  /** What each running request adds to a decode step, in seconds (its KV cache read). 0: no contention. */
  perRequestSeconds: number;
}

/** What one request got from the engine. */
export interface EngineResult {
  /** Tokens decoded for it (all of them when it completed, those before the abort otherwise). */
  generatedTokens: number;
  /** Seconds it waited for a slot. */
  queuedSeconds: number;
}

interface Request {
  remaining: number;
  generated: number;
  submittedAt: number;
  admittedAt: number;
  resolve: (result: EngineResult) => void;
}

// Requests this close to done (in tokens) are done: floating-point residue of the shared progress.
const DONE_EPSILON = 1e-6;

/**
 * An inference engine on a {@link VirtualClock}: a fixed number of slots, decode steps that slow down
 * as the batch grows, requests queued when the slots are full. `generate(tokens)` resolves when that
 * many tokens are decoded; aborting it frees its slot at once.
 */
export class SimulatedEngine {
  private readonly running = new Set<Request>();
  private readonly waiting: Request[] = [];
  private lastAdvance = 0;
  private cancelTimer: (() => void) | undefined;
  /** Tokens decoded over the run, for requests completed or aborted alike. */
  generatedTokens = 0;
  /** The integral of running requests over time, in request-seconds. */
  busyRequestSeconds = 0;
  /** The most requests running at once. */
  peakRunning = 0;

  constructor(
    private readonly clock: VirtualClock,
    readonly options: EngineOptions,
  ) {
    if (!(options.slots >= 1) || !(options.stepSeconds > 0) || !(options.perRequestSeconds >= 0)) {
      throw new Error('engine: slots >= 1, stepSeconds > 0 and perRequestSeconds >= 0');
    }
  }

  /** Seconds of one decode step with `running` requests in the batch. */
  stepTime(running: number): number {
    return this.options.stepSeconds + this.options.perRequestSeconds * running;
  }

  /** Requests decoding now. */
  get runningCount(): number {
    return this.running.size;
  }

  /** Requests waiting for a slot. */
  get waitingCount(): number {
    return this.waiting.length;
  }

  /**
   * Decodes `tokens` tokens. Resolves with what was decoded; on abort, rejects with the signal's
   * reason after counting the tokens decoded so far (in {@link generatedTokens} and `onAbort`).
   */
  generate(
    tokens: number,
    signal?: AbortSignal,
    onAbort?: (generatedTokens: number) => void,
  ): Promise<EngineResult> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        onAbort?.(0);
        reject(signal.reason);
        return;
      }
      this.advance();
      const request: Request = {
        remaining: Math.max(tokens, 0),
        generated: 0,
        submittedAt: this.clock.now,
        admittedAt: Number.NaN,
        resolve: (result) => {
          signal?.removeEventListener('abort', abort);
          resolve(result);
        },
      };
      const abort = () => {
        this.advance();
        if (this.running.delete(request)) this.admit();
        else {
          const index = this.waiting.indexOf(request);
          if (index >= 0) this.waiting.splice(index, 1);
        }
        this.reschedule();
        onAbort?.(request.generated);
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', abort, { once: true });
      this.waiting.push(request);
      this.admit();
      this.finishDone();
      this.reschedule();
    });
  }

  /** Moves every running request forward by the tokens decoded since the last change. */
  private advance(): void {
    const now = this.clock.now;
    const elapsed = now - this.lastAdvance;
    this.lastAdvance = now;
    const count = this.running.size;
    if (elapsed <= 0 || count === 0) return;
    const tokens = elapsed / this.stepTime(count);
    for (const request of this.running) {
      const step = Math.min(tokens, request.remaining);
      request.remaining -= step;
      request.generated += step;
      this.generatedTokens += step;
    }
    this.busyRequestSeconds += count * elapsed;
  }

  private admit(): void {
    while (this.running.size < this.options.slots && this.waiting.length > 0) {
      const request = this.waiting.shift() as Request;
      request.admittedAt = this.clock.now;
      this.running.add(request);
    }
    this.peakRunning = Math.max(this.peakRunning, this.running.size);
  }

  private finishDone(): void {
    for (;;) {
      let finished = false;
      for (const request of this.running) {
        if (request.remaining > DONE_EPSILON) continue;
        this.running.delete(request);
        finished = true;
        request.resolve({
          generatedTokens: request.generated,
          queuedSeconds: request.admittedAt - request.submittedAt,
        });
      }
      if (!finished) return;
      this.admit();
    }
  }

  private reschedule(): void {
    this.cancelTimer?.();
    this.cancelTimer = undefined;
    if (this.running.size === 0) return;
    let least = Number.POSITIVE_INFINITY;
    for (const request of this.running) least = Math.min(least, request.remaining);
    const at = this.clock.now + least * this.stepTime(this.running.size);
    this.cancelTimer = this.clock.schedule(at, () => {
      this.cancelTimer = undefined;
      this.advance();
      // The timer's time was computed for the least remaining request: it is done now.
      for (const request of this.running) {
        if (request.remaining <= least * 1e-9 + DONE_EPSILON) {
          this.generatedTokens += request.remaining;
          request.generated += request.remaining;
          request.remaining = 0;
        }
      }
      this.finishDone();
      this.reschedule();
    });
  }
}
