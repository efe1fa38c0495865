import type { SchedulerLogger, SessionDiscarder } from './generate.js';

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
