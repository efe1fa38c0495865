/** Options of {@link sleep}. */
export interface SleepOptions {
  /** Let the process exit while sleeping (a timer that must not keep a server alive). */
  unref?: boolean;
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number, options: SleepOptions = {}): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (options.unref) timer.unref();
  });
}

/** Options of {@link Waiters.wait}. */
export interface WaitOptions {
  /** Give up after this many milliseconds (resolving false). */
  timeoutMs?: number;
  /** Give up when it aborts (resolving false). */
  signal?: AbortSignal;
}

/**
 * Callers waiting for something to change (a slot to free up, a pause to end, work to drain), woken
 * together by whoever changes it. A waiter with a timeout wakes at the timeout too.
 *
 * @example
 * ```ts
 * const resumed = new Waiters();
 * while (paused) await resumed.wait();
 * // elsewhere: paused = false; resumed.wakeAll();
 * ```
 */
export class Waiters {
  #wakers: (() => void)[] = [];

  /** How many callers wait now. */
  get size(): number {
    return this.#wakers.length;
  }

  /**
   * Resolves true when woken, false when `timeoutMs` passed or `signal` aborted first (neither:
   * waits until woken).
   */
  wait(options: WaitOptions = {}): Promise<boolean> {
    const { timeoutMs, signal } = options;
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve(false);
      let timer: NodeJS.Timeout | undefined;
      const settle = (woken: boolean) => {
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (!woken) {
          const index = this.#wakers.indexOf(waker);
          if (index !== -1) this.#wakers.splice(index, 1);
        }
        resolve(woken);
      };
      const waker = () => settle(true);
      const onAbort = () => settle(false);
      if (timeoutMs !== undefined && Number.isFinite(timeoutMs))
        timer = setTimeout(() => settle(false), timeoutMs);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#wakers.push(waker);
    });
  }

  /** Wakes every caller waiting now (a caller that waits after this waits for the next wake). */
  wakeAll(): void {
    const wakers = this.#wakers;
    this.#wakers = [];
    for (const wake of wakers) wake();
  }
}
