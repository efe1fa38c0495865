import {
  type CapabilitiesResponse,
  type ChatCompletionResponse,
  capabilitiesResponseSchema,
  type chatCompletionRequestSchema,
  chatCompletionResponseSchema,
  type DiscardResponse,
  DressageError,
  discardResponseSchema,
  type FinalizeResponse,
  finalizeResponseSchema,
  type RolloutPauseResponse,
  type RolloutPauseState,
  type RolloutResumeResponse,
  rolloutPauseResponseSchema,
  rolloutPauseStateSchema,
  rolloutResumeResponseSchema,
  type TrajectoryReadResponse,
  type TrajectoryStats,
  trajectoryReadShapeSchema,
  trajectoryStatsSchema,
} from '@dressage/protocol';
import { codeOfHttpStatus } from '@dressage/protocol/http';
import { sleep } from '@dressage/protocol/internal';
import type { z } from 'zod';
import { identifierProblem } from './identifiers.js';
import type {
  discardRequestSchema,
  finalizeRequestSchema,
  readRequestSchema,
  rolloutPauseRequestSchema,
  rolloutResumeRequestSchema,
} from './request-bodies.js';

/** A chat completion request as a caller writes it (any OpenAI keys beside those the proxy reads). */
export type ChatCompletionRequestBody = z.input<typeof chatCompletionRequestSchema>;

/** Options of {@link ProxyClient}. */
export interface ProxyClientOptions {
  /** The proxy base URL, e.g. `http://127.0.0.1:8800`. */
  baseUrl: string;
  /** Bearer key; omit for a proxy started with `--api-key no-auth`. */
  apiKey?: string;
  /** Per-call timeout in milliseconds. Default 300 000. */
  timeoutMs?: number;
  /** Retries after a 503 or a connection error. Default 3. */
  maxRetries?: number;
  /** First backoff in milliseconds, doubled per retry. Default 200. */
  backoffMs?: number;
}

/** A non-2xx answer of the proxy, with its status, the code the status stands for, and the parsed body. */
export class ProxyClientError extends DressageError {
  readonly status: number;
  readonly body: unknown;

  constructor(status: number, body: unknown, path: string) {
    super({
      code: codeOfHttpStatus(status),
      message: `${path} answered HTTP ${status}: ${typeof body === 'string' ? body : JSON.stringify(body)}`,
      details: { status, path },
    });
    this.name = 'ProxyClientError';
    this.status = status;
    this.body = body;
  }
}

/** Ids a chat completion is recorded under. */
export interface CompletionIds {
  sessionId: string;
  instanceId?: string;
  turnId?: string;
  /** Pins the weight version (`X-Dressage-Expected-Version`). */
  expectedVersion?: string;
}

/** A `/trajectory/read` answer for one trajectory. */
export type TrajectoryRead = Extract<TrajectoryReadResponse, { mode: 'trajectory' }>;

/** Arguments of {@link ProxyClient.readTrajectory}. */
export interface ReadTrajectoryOptions {
  trajectoryId?: string;
  sessionId?: string;
  instanceId?: string;
  maxGroups?: number;
  segmentView?: 'lineage' | 'timeline';
  drain?: boolean;
}

/**
 * The rollout-side client of the proxy (§1.12). Retries with exponential backoff on 503 and on
 * connection errors only; every other error status is thrown at once as a {@link ProxyClientError}.
 *
 * @example
 * ```ts
 * const client = new ProxyClient({ baseUrl: 'http://127.0.0.1:8800' });
 * await client.chatCompletions({ messages: [{ role: 'user', content: 'hi' }] }, { sessionId: 's1' });
 * const finalized = await client.finalizeSession('s1');
 * const { data } = await client.readTrajectory({ trajectoryId: 's1', drain: true });
 * ```
 */
export class ProxyClient {
  readonly baseUrl: string;
  readonly #options: Required<Omit<ProxyClientOptions, 'apiKey' | 'baseUrl'>> & { apiKey?: string };

  constructor(options: ProxyClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.#options = {
      apiKey: options.apiKey,
      timeoutMs: options.timeoutMs ?? 300_000,
      maxRetries: options.maxRetries ?? 3,
      backoffMs: options.backoffMs ?? 200,
    };
  }

  /**
   * The OpenAI base URL that pins every call to `sessionId` (`{baseUrl}/s/{session}/v1`), for an
   * agent CLI that sets its own `X-Session-Id` header: the URL's session wins over headers.
   */
  sessionBaseUrl(sessionId: string): string {
    const problem = identifierProblem(sessionId);
    if (problem !== null) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `sessionId ${problem}`,
        details: { field: 'sessionId' },
      });
    }
    return `${this.baseUrl}/s/${encodeURIComponent(sessionId)}/v1`;
  }

  /** `POST /v1/chat/completions` with the id headers; the answer is checked against OpenAI's shape. */
  async chatCompletions(
    body: ChatCompletionRequestBody,
    ids: CompletionIds,
  ): Promise<ChatCompletionResponse> {
    for (const [field, value] of [
      ['sessionId', ids.sessionId],
      ['instanceId', ids.instanceId],
      ['turnId', ids.turnId],
    ] as const) {
      const problem = value === undefined ? null : identifierProblem(value);
      if (problem !== null) {
        // A client error: never sent, never retried.
        throw new DressageError({
          code: 'invalid_argument',
          message: `${field} ${problem}`,
          details: { field },
        });
      }
    }
    const headers: Record<string, string> = { 'x-session-id': ids.sessionId };
    if (ids.instanceId) headers['x-instance-id'] = ids.instanceId;
    if (ids.turnId) headers['x-turn-id'] = ids.turnId;
    if (ids.expectedVersion) headers['x-dressage-expected-version'] = ids.expectedVersion;
    const answer = await this.#call('POST', '/v1/chat/completions', { ...body, stream: false }, headers);
    return this.#answer(chatCompletionResponseSchema, answer, '/v1/chat/completions');
  }

  /** `POST /session/finalize`. */
  finalizeSession(
    sessionId: string,
    options: { instanceId?: string; label?: unknown } = {},
  ): Promise<FinalizeResponse> {
    const body: z.input<typeof finalizeRequestSchema> = { session_id: sessionId };
    if (options.instanceId) body.instance_id = options.instanceId;
    if (options.label !== undefined) body.label = options.label;
    return this.#call('POST', '/session/finalize', body).then((answer) =>
      this.#answer(finalizeResponseSchema, answer, '/session/finalize'),
    );
  }

  /** `POST /session/discard`. */
  discardSession(sessionId: string): Promise<DiscardResponse> {
    const body: z.input<typeof discardRequestSchema> = { session_id: sessionId };
    return this.#call('POST', '/session/discard', body).then((answer) =>
      this.#answer(discardResponseSchema, answer, '/session/discard'),
    );
  }

  /**
   * `POST /trajectory/read`: one trajectory's segments by id, or (without an id) the ready groups
   * of batch mode. Token data arrives in typed arrays; the answer's shape is checked, not every
   * token.
   */
  readTrajectory(
    options: ReadTrajectoryOptions & ({ trajectoryId: string } | { sessionId: string }),
  ): Promise<TrajectoryRead>;
  readTrajectory(options?: ReadTrajectoryOptions): Promise<TrajectoryReadResponse>;
  async readTrajectory(options: ReadTrajectoryOptions = {}): Promise<TrajectoryReadResponse> {
    const body: z.input<typeof readRequestSchema> = { drain: options.drain ?? false };
    if (options.trajectoryId) body.trajectory_id = options.trajectoryId;
    if (options.sessionId) body.session_id = options.sessionId;
    if (options.instanceId) body.instance_id = options.instanceId;
    if (options.maxGroups) body.max_groups = options.maxGroups;
    if (options.segmentView) body.segment_view = options.segmentView;
    const answer = await this.#call('POST', '/trajectory/read', body);
    const read = this.#answer(trajectoryReadShapeSchema, answer, '/trajectory/read');
    const expected = options.trajectoryId || options.sessionId ? 'trajectory' : 'batch';
    if (read.mode !== expected) {
      throw new DressageError({
        code: 'internal',
        message: `/trajectory/read answered mode ${read.mode} to a ${expected} read`,
        details: { path: '/trajectory/read' },
      });
    }
    return read;
  }

  /** `GET /trajectory/stats`. */
  trajectoryStats(): Promise<TrajectoryStats> {
    return this.#call('GET', '/trajectory/stats').then((answer) =>
      this.#answer(trajectoryStatsSchema, answer, '/trajectory/stats'),
    );
  }

  /** `POST /v1/rollout/pause`. */
  pauseRollout(reason = 'weight_update', timeoutSeconds?: number): Promise<RolloutPauseResponse> {
    const body: z.input<typeof rolloutPauseRequestSchema> = { reason };
    if (timeoutSeconds !== undefined) body.timeout_seconds = timeoutSeconds;
    return this.#call('POST', '/v1/rollout/pause', body).then((answer) =>
      this.#answer(rolloutPauseResponseSchema, answer, '/v1/rollout/pause'),
    );
  }

  /** `POST /v1/rollout/resume`. */
  resumeRollout(version?: string, reason = 'weight_update'): Promise<RolloutResumeResponse> {
    const body: z.input<typeof rolloutResumeRequestSchema> = { reason };
    if (version !== undefined) body.version = version;
    return this.#call('POST', '/v1/rollout/resume', body).then((answer) =>
      this.#answer(rolloutResumeResponseSchema, answer, '/v1/rollout/resume'),
    );
  }

  /** `GET /v1/rollout/pause_state`. */
  pauseState(): Promise<RolloutPauseState> {
    return this.#call('GET', '/v1/rollout/pause_state').then((answer) =>
      this.#answer(rolloutPauseStateSchema, answer, '/v1/rollout/pause_state'),
    );
  }

  /** `GET /integration/capabilities`. */
  capabilities(): Promise<CapabilitiesResponse> {
    return this.#call('GET', '/integration/capabilities').then((answer) =>
      this.#answer(capabilitiesResponseSchema, answer, '/integration/capabilities'),
    );
  }

  // A 2xx answer that does not have the documented shape is the proxy's fault, not the caller's.
  #answer<T extends z.ZodType>(schema: T, answer: unknown, path: string): z.output<T> {
    const result = schema.safeParse(answer);
    if (result.success) return result.data;
    throw new DressageError({
      code: 'internal',
      message: `${path} answered a body of the wrong shape: ${result.error.issues
        .slice(0, 3)
        .map((issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`)
        .join('; ')}`,
      details: { path },
    });
  }

  async #call(
    method: 'GET' | 'POST',
    path: string,
    body?: unknown,
    extraHeaders: Record<string, string> = {},
  ): Promise<unknown> {
    const headers: Record<string, string> = { ...extraHeaders };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (this.#options.apiKey) headers.authorization = `Bearer ${this.#options.apiKey}`;
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await fetch(`${this.baseUrl}${path}`, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(this.#options.timeoutMs),
        });
      } catch (error) {
        // Connection-level failures (fetch's TypeError with a network cause) are retried; a timeout
        // is not (the call may have run), nor a request fetch refused to send (a bad header value).
        const timedOut = error instanceof Error && error.name === 'TimeoutError';
        const cause = error instanceof TypeError ? (error.cause as { code?: string } | undefined) : null;
        const unsendable = cause === undefined || cause?.code === 'UND_ERR_INVALID_ARG';
        if (timedOut || unsendable || attempt >= this.#options.maxRetries) {
          throw new DressageError({
            code: timedOut ? 'deadline_exceeded' : unsendable ? 'invalid_argument' : 'unavailable',
            message: `${method} ${path} failed: ${(error as Error).message}`,
            cause: error,
          });
        }
        await sleep(this.#options.backoffMs * 2 ** attempt);
        continue;
      }
      const text = await response.text();
      let parsed: unknown = text;
      try {
        parsed = text === '' ? null : JSON.parse(text);
      } catch {
        parsed = text;
      }
      if (response.ok) return parsed;
      if (response.status === 503 && attempt < this.#options.maxRetries) {
        await sleep(this.#options.backoffMs * 2 ** attempt);
        continue;
      }
      throw new ProxyClientError(response.status, parsed, path);
    }
  }
}
