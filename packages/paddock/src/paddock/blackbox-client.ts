// The HTTP client of one BlackboxServer, with its retries and its error.
import { randomBytes } from 'node:crypto';
import { DressageError } from '@dressage/protocol';
import {
  type BlackboxErrorBody,
  type BlackboxExecuteCommandResponse,
  type BlackboxRegisterResponse,
  type BlackboxTurn,
  blackboxErrorBodySchema,
  blackboxExecuteCommandResponseSchema,
  blackboxMessagesAcceptedSchema,
  blackboxRegisterResponseSchema,
  blackboxTurnSchema,
} from '@dressage/protocol/blackbox';
import { codeOfHttpStatus } from '@dressage/protocol/http';
import { sleep } from '@dressage/protocol/internal';
import type { z } from 'zod';
import type { BlackboxMessage, BlackboxRegisterRequest } from '../blackbox/schemas.js';

/** An HTTP error answered by a BlackboxServer, with its error envelope. */
export class BlackboxCallError extends DressageError {
  /** The HTTP status the BlackboxServer answered. */
  readonly status: number;
  /** The error envelope it answered. */
  readonly body: BlackboxErrorBody;

  constructor(
    status: number,
    envelope: Pick<BlackboxErrorBody, 'error' | 'message'> & { details?: Record<string, unknown> },
  ) {
    const body: BlackboxErrorBody = { ...envelope, details: envelope.details ?? {} };
    super({
      message: `BlackboxServer answered ${status}: ${body.error} ${body.message}`.trim(),
      code: codeOfHttpStatus(status),
      details: { status },
    });
    this.name = 'BlackboxCallError';
    this.status = status;
    this.body = body;
  }
  /** The reference's error name (`backend_timeout`, `context_overflow`, ...). */
  get error(): string {
    return this.body.error;
  }
}

// The envelope of a non-2xx answer; an answer without one (a proxy in between, a crash) is named by
// its status.
function errorBodyOf(status: number, answer: unknown): BlackboxErrorBody {
  const envelope = blackboxErrorBodySchema.safeParse(answer);
  if (envelope.success) return envelope.data;
  return {
    error: `http_${status}`,
    message: 'the answer carries no error envelope',
    details: { body: answer },
  };
}

/** Retry settings of {@link BlackboxClient}. */
export interface RetryOptions {
  /** Default `DRESSAGE_BLACKBOX_AGENT_REQUEST_MAX_ATTEMPTS`, else 6. */
  maxAttempts?: number;
  /** Seconds; doubles up to `maxDelaySeconds`. Default 1. */
  initialDelaySeconds?: number;
  maxDelaySeconds?: number;
  jitter?: number;
}

/**
 * An HTTP client of one BlackboxServer. Register, message submit and poll are retried on 503 and on
 * connection failures (with backoff, honouring Retry-After); execute_cmd, pause and resume are not.
 */
export class BlackboxClient {
  readonly #retry: Required<RetryOptions>;

  readonly #headers: Record<string, string>;

  constructor(
    readonly baseUrl: string,
    retry: RetryOptions = {},
    /** Sent with every call: the endpoint's headers (a slot server's bearer token). */
    headers: Record<string, string> = {},
  ) {
    this.#headers = headers;
    const fromEnv = Number(
      process.env.DRESSAGE_BLACKBOX_AGENT_REQUEST_MAX_ATTEMPTS ??
        process.env.DRESSAGE_SANDBOX_REQUEST_MAX_ATTEMPTS ??
        6,
    );
    this.#retry = {
      maxAttempts: retry.maxAttempts ?? (Number.isFinite(fromEnv) && fromEnv > 0 ? fromEnv : 6),
      initialDelaySeconds: retry.initialDelaySeconds ?? 1,
      maxDelaySeconds: retry.maxDelaySeconds ?? 10,
      jitter: retry.jitter ?? 0.2,
    };
  }

  /**
   * One call, its answer checked against `schema` (a BlackboxServer answer of
   * `@dressage/protocol`); `retried` retries 503s and connection failures. A non-2xx answer throws
   * a {@link BlackboxCallError}, an answer of the wrong shape a `DressageError` (`internal`).
   */
  async request<T extends z.ZodType>(
    method: string,
    path: string,
    schema: T,
    body?: unknown,
    retried = false,
  ): Promise<z.output<T>> {
    const attempts = retried ? this.#retry.maxAttempts : 1;
    let delay = this.#retry.initialDelaySeconds;
    for (let attempt = 1; ; attempt++) {
      let wait = delay;
      try {
        const response = await fetch(`${this.baseUrl}${path}`, {
          method,
          headers:
            body === undefined ? this.#headers : { ...this.#headers, 'content-type': 'application/json' },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        const answer: unknown = await response.json().catch(() => null);
        if (response.status < 400) return this.#checked(schema, answer, path);
        if (response.status !== 503 || attempt >= attempts)
          throw new BlackboxCallError(response.status, errorBodyOf(response.status, answer));
        const retryAfter = Number(response.headers.get('retry-after'));
        if (Number.isFinite(retryAfter) && retryAfter > 0)
          wait = Math.min(retryAfter, this.#retry.maxDelaySeconds);
      } catch (error) {
        if (DressageError.isInstance(error) || attempt >= attempts) throw error;
      }
      const jittered = wait * (1 + (Math.random() * 2 - 1) * this.#retry.jitter);
      await sleep(Math.max(0, jittered) * 1000);
      delay = Math.min(delay * 2, this.#retry.maxDelaySeconds);
    }
  }

  // The answers are small records (no token data), so the whole schema is cheap.
  #checked<T extends z.ZodType>(schema: T, answer: unknown, path: string): z.output<T> {
    const result = schema.safeParse(answer);
    if (result.success) return result.data;
    throw new DressageError({
      code: 'internal',
      message: `BlackboxServer ${path} answered a body of the wrong shape: ${result.error.issues
        .slice(0, 3)
        .map((issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`)
        .join('; ')}`,
      details: { path },
    });
  }

  /** `POST /v1/rollout/register`: binds the server to one rollout. */
  register(body: BlackboxRegisterRequest): Promise<BlackboxRegisterResponse> {
    return this.request('POST', '/v1/rollout/register', blackboxRegisterResponseSchema, body, true);
  }

  /** `POST /v1/sessions/{id}/execute_cmd`: one shell command in the agent's workspace. */
  executeCommand(sessionId: string, cmd: string, timeout?: number): Promise<BlackboxExecuteCommandResponse> {
    return this.request(
      'POST',
      `/v1/sessions/${sessionId}/execute_cmd`,
      blackboxExecuteCommandResponseSchema,
      {
        cmd,
        ...(timeout ? { timeout } : {}),
      },
    );
  }

  /** Submits an async turn and polls it until it is terminal; failed turns throw with their record. */
  async callAgent(
    sessionId: string,
    messages: readonly BlackboxMessage[],
    options: { turnId?: string; pollWaitSeconds?: number } = {},
  ): Promise<BlackboxTurn> {
    const turnId = options.turnId ?? `turn-${randomBytes(8).toString('hex')}`;
    await this.request(
      'POST',
      `/v1/sessions/${sessionId}/messages`,
      blackboxMessagesAcceptedSchema,
      { turn_id: turnId, mode: 'async', messages },
      true,
    );
    const wait = options.pollWaitSeconds ?? Number(process.env.DRESSAGE_BLACKBOX_AGENT_POLL_WAIT_SEC ?? 30);
    while (true) {
      const turn = await this.request(
        'GET',
        `/v1/sessions/${sessionId}/turns/${turnId}?wait=${wait}`,
        blackboxTurnSchema,
        undefined,
        true,
      );
      if (turn.status === 'committed') return turn;
      if (turn.status === 'failed' || turn.status === 'unknown' || turn.status === 'cancelled') {
        const error = turn.error;
        throw new BlackboxCallError(error?.http_status ?? 502, {
          error: error?.error ?? '',
          message: error?.message ?? `turn ${turnId} ended ${turn.status}`,
          details: error?.details ?? {},
        });
      }
    }
  }
}
