import type {
  BlackboxPauseResponse,
  BlackboxPauseState,
  BlackboxResumeResponse,
} from '@dressage/protocol/blackbox';
import { Waiters } from '@dressage/protocol/internal';
import { BlackboxHttpError, parseBody } from './http-error.js';
import type { RolloutLlmProxy } from './llm-proxy.js';
import { blackboxPauseRequestSchema, resumeRequestSchema } from './schemas.js';

/** What the pause control reads from the rest of the server. */
export interface PauseControlContext {
  /** The LLM proxy of the current binding, if any. */
  proxy(): RolloutLlmProxy | null;
  /** HTTP requests in flight, the pause request included. */
  httpInflight(): number;
}

/**
 * Pause and resume around weight updates: holds new turns, pauses the LLM proxy (and through it the
 * upstream engine) and keeps the paused time, which does not count against a turn's timeout.
 */
export class PauseControl {
  #pausedFlag = false;
  #reason: string | null = null;
  #weightVersion: string | null = null;
  #pausedSince: number | null = null;
  #pausedTotalMs = 0;
  readonly #resumed = new Waiters();

  readonly #context: PauseControlContext;

  constructor(context: PauseControlContext) {
    this.#context = context;
  }

  /** True between a pause and the next resume. */
  get paused(): boolean {
    return this.#pausedFlag;
  }

  /** Milliseconds spent paused so far, the current pause included. */
  totalPausedMs(): number {
    return this.#pausedTotalMs + (this.#pausedSince === null ? 0 : Date.now() - this.#pausedSince);
  }

  /** Resolves once the server is not paused (at once when it is not). */
  async whilePaused(): Promise<void> {
    while (this.#pausedFlag) await this.#resumed.wait();
  }

  /** Wakes everything waiting on a resume (a resume, or shutdown). */
  releaseWaiters(): void {
    this.#resumed.wakeAll();
  }

  /** `POST /v1/rollout/pause`: 503 `pause_timeout` when generations do not quiesce in time. */
  async pause(body: unknown): Promise<BlackboxPauseResponse> {
    const request = parseBody(blackboxPauseRequestSchema, body, 'pause request');
    if (!this.#pausedFlag) {
      this.#pausedFlag = true;
      this.#pausedSince = Date.now();
    }
    this.#reason = request.reason;
    const proxy = this.#context.proxy();
    proxy?.pause();
    const details: Record<string, unknown> = {};
    if (proxy) {
      try {
        details.upstream = await proxy.pauseUpstream(request.reason, request.timeout_seconds ?? null);
      } catch (error) {
        details.upstream_error = error instanceof Error ? error.message : String(error);
      }
    }
    const quiesced = proxy ? await proxy.drain((request.timeout_seconds ?? 30) * 1000) : true;
    const response: BlackboxPauseResponse = {
      status: 'paused',
      reason: request.reason,
      quiesced,
      version: this.#weightVersion,
      http_inflight_requests: Math.max(this.#context.httpInflight() - 1, 0),
      active_sglang_generations: proxy?.inflightRequests ?? 0,
      suspended_generations: proxy?.inflightRequests ?? 0,
      details,
    };
    if (!quiesced) {
      throw new BlackboxHttpError({
        status: 503,
        error: 'pause_timeout',
        message: 'Generations did not quiesce in time',
        details: {
          ...response,
        },
      });
    }
    return response;
  }

  /** `POST /v1/rollout/resume`. */
  async resume(body: unknown): Promise<BlackboxResumeResponse> {
    const request = parseBody(resumeRequestSchema, body, 'resume request');
    if (request.version !== null && request.version !== undefined)
      this.#weightVersion = String(request.version);
    const details: Record<string, unknown> = {};
    const proxy = this.#context.proxy();
    if (proxy) {
      try {
        details.upstream = await proxy.resumeUpstream(request.reason, request.version ?? null);
      } catch (error) {
        details.upstream_error = error instanceof Error ? error.message : String(error);
      }
    }
    if (this.#pausedFlag && this.#pausedSince !== null) this.#pausedTotalMs += Date.now() - this.#pausedSince;
    this.#pausedFlag = false;
    this.#pausedSince = null;
    this.#reason = null;
    proxy?.resume(request.version ?? null);
    this.releaseWaiters();
    return { status: 'resumed', reason: request.reason, version: this.#weightVersion, details };
  }

  /** `GET /v1/rollout/pause_state`. */
  state(): BlackboxPauseState {
    const proxy = this.#context.proxy();
    return {
      paused: this.#pausedFlag,
      pause_reason: this.#reason,
      version: this.#weightVersion,
      adapter: {
        paused: proxy?.isPaused ?? this.#pausedFlag,
        pause_reason: this.#reason,
        version: proxy?.version ?? this.#weightVersion,
        http_inflight_requests: proxy?.inflightRequests ?? 0,
        total_paused_seconds: this.totalPausedMs() / 1000,
      },
    };
  }
}
