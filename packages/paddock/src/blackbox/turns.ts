import { randomBytes } from 'node:crypto';
import type {
  BlackboxAbortResponse,
  BlackboxCancelResponse,
  BlackboxMessagesAccepted,
  BlackboxMessagesResponse,
  BlackboxSessionCounts,
  BlackboxSessionResponse,
  BlackboxSessionState,
  BlackboxTurn,
  BlackboxTurnStatus,
  TurnBackend,
  TurnError,
} from '@dressage/protocol/blackbox';
import { sleep } from '@dressage/protocol/internal';
import type { z } from 'zod';
import { type AdapterTurnResult, AgentTurnError } from './adapter.js';
import type { RolloutBinding } from './binding.js';
import { fingerprintOf } from './fingerprint.js';
import { BlackboxHttpError, parseBody, unknownTurn } from './http-error.js';
import type { ProxyIncident } from './llm-proxy.js';
import type { PauseControl } from './pause.js';
import { type BlackboxMessage, emptyUsage, messagesRequestSchema, type TurnUsage } from './schemas.js';

/** One turn of a session and where it stands. */
export interface Turn {
  id: string;
  fingerprint: string;
  messages: BlackboxMessage[];
  metadata: Record<string, unknown> | null;
  status: BlackboxTurnStatus;
  outputs: BlackboxMessage[] | null;
  usage: TurnUsage | null;
  backend: TurnBackend | null;
  error: TurnError | null;
  createdAt: string;
  updatedAt: string;
  done: Promise<void>;
  finish: () => void;
  controller: AbortController;
  // The first reason to stop wins; it decides the outcome row of the error table.
  stopReason: TurnError | null;
  cancelRequested: boolean;
}

/** The session a registration binds the server to, with its turns and history. */
export interface BoundSession {
  id: string;
  instanceId: string;
  state: BlackboxSessionState;
  turnMode: 'single' | 'explicit' | null;
  singleTurnId: string | null;
  turns: Map<string, Turn>;
  order: string[];
  activeTurnId: string | null;
  turnCount: number;
  history: BlackboxMessage[];
  lock: Promise<void>;
  createdAt: string;
  updatedAt: string;
}

/** A sync or async answer to a messages request. */
export type MessagesResult =
  | { status: 202; body: BlackboxMessagesAccepted }
  | { status: 200; body: BlackboxMessagesResponse };

const now = () => new Date().toISOString();

/** True once a turn can no longer change. */
export function isTerminal(status: BlackboxTurnStatus): boolean {
  return status === 'committed' || status === 'failed' || status === 'cancelled' || status === 'unknown';
}

/** The turn error an LLM proxy incident stands for. */
export function incidentError(incident: ProxyIncident): TurnError {
  if (incident.kind === 'max_steps') {
    return {
      error: 'max_steps_exceeded',
      message: `Agent exceeded max_steps (${incident.maxSteps})`,
      details: { max_steps: incident.maxSteps, attempted_step: incident.attemptedStep },
      http_status: 429,
    };
  }
  if (incident.kind === 'context_overflow') {
    return {
      error: 'context_overflow',
      message: incident.message,
      details: incident.details,
      http_status: 413,
    };
  }
  return {
    error: 'backend_error',
    message: `Backend request failed: Dressage proxy ${incident.error}: ${incident.message}`,
    details: { proxy_error: incident.error },
    http_status: 502,
  };
}

/**
 * The turn state machine: sessions, the turns submitted to them (idempotent by turn id and body),
 * one turn at a time through the agent, and the reference's error table for turns that do not
 * commit (cancelled, aborted, timed out, max steps, context overflow, backend failure, shutdown).
 */
export class TurnEngine {
  readonly #sessions = new Map<string, BoundSession>();

  readonly #binding: RolloutBinding;
  readonly #pause: PauseControl;

  constructor(binding: RolloutBinding, pause: PauseControl) {
    this.#binding = binding;
    this.#pause = pause;
  }

  /** Forgets every session. */
  reset(): void {
    this.#sessions.clear();
  }

  /** Opens a fresh session. */
  open(sessionId: string, instanceId: string): void {
    const created = now();
    this.#sessions.set(sessionId, {
      id: sessionId,
      instanceId,
      state: 'active',
      turnMode: null,
      singleTurnId: null,
      turns: new Map(),
      order: [],
      activeTurnId: null,
      turnCount: 0,
      history: [],
      lock: Promise.resolve(),
      createdAt: created,
      updatedAt: created,
    });
  }

  /** True while some session is not aborted. */
  hasLiveSessions(): boolean {
    return [...this.#sessions.values()].some((session) => session.state !== 'aborted');
  }

  /** Desyncs every session that is not aborted (the agent failed). */
  desyncAll(): void {
    for (const session of this.#sessions.values())
      if (session.state !== 'aborted') session.state = 'desynced';
  }

  /** Sessions by state. */
  counts(): Omit<BlackboxSessionCounts, 'max_sessions'> {
    let active = 0;
    let desynced = 0;
    let aborted = 0;
    for (const session of this.#sessions.values()) {
      if (session.state === 'active') active += 1;
      else if (session.state === 'desynced') desynced += 1;
      else aborted += 1;
    }
    return {
      active_count: active,
      desynced_count: desynced,
      aborted_count: aborted,
      total_count: this.#sessions.size,
    };
  }

  /** Fails every active turn with `server_shutdown`; resolves with their completions. */
  shutdown(): Promise<void>[] {
    const pending: Promise<void>[] = [];
    for (const session of this.#sessions.values()) {
      const turn = session.activeTurnId ? session.turns.get(session.activeTurnId) : undefined;
      if (turn && !isTerminal(turn.status)) {
        this.#stopTurn(turn, {
          error: 'server_shutdown',
          message: 'Server shut down during the turn',
          details: {},
          http_status: 504,
        });
        pending.push(turn.done);
      }
    }
    return pending;
  }

  /** The bound session `sessionId` (409 when none is registered or it is another one). */
  boundSession(sessionId: string): BoundSession {
    const bound = this.#binding.boundSessionId;
    if (bound === null)
      throw new BlackboxHttpError({
        status: 409,
        error: 'not_registered',
        message: 'No rollout is registered',
      });
    if (sessionId !== bound) {
      throw new BlackboxHttpError({
        status: 409,
        error: 'bound_session_mismatch',
        message: 'Session id does not match the bound session',
        details: {
          expected: bound,
          actual: sessionId,
        },
      });
    }
    const session = this.#sessions.get(sessionId);
    if (!session)
      throw new BlackboxHttpError({
        status: 404,
        error: 'not_found',
        message: `Unknown session ${sessionId}`,
      });
    return session;
  }

  /** The LLM proxy reported an incident: max steps and context overflow end the current turn. */
  onIncident(incident: ProxyIncident): void {
    const turnId = this.#binding.llmProxy?.currentTurn?.turnId;
    const bound = this.#binding.boundSessionId;
    const session = bound !== null ? this.#sessions.get(bound) : undefined;
    const turn = turnId ? session?.turns.get(turnId) : undefined;
    if (!turn) return;
    // Invalidated rollouts are left to the agent: it receives an empty reply and ends by itself.
    if (incident.kind === 'max_steps') this.#stopTurn(turn, incidentError(incident));
    else if (incident.kind === 'context_overflow') this.#stopTurn(turn, incidentError(incident));
  }

  /** `POST /v1/sessions/{id}/messages`: submits a turn; sync mode waits for it to commit. */
  async messages(sessionId: string, body: unknown): Promise<MessagesResult> {
    const request = parseBody(messagesRequestSchema, body, 'messages request');
    const session = this.boundSession(sessionId);
    const content = userTextOf(request);
    const fingerprint = fingerprintOf(request.messages);
    const { turn, replay } = await this.#withLock(session, async () => {
      await this.#pause.whilePaused();
      const turnId = this.#resolveTurnId(session, request.turn_id ?? null);
      const existing = session.turns.get(turnId);
      if (existing) {
        if (existing.fingerprint !== fingerprint) {
          throw new BlackboxHttpError({
            status: 409,
            error: 'conflict',
            message: `Turn ${turnId} was submitted with a different body`,
            details: {
              turn_id: turnId,
            },
          });
        }
        return { turn: existing, replay: true };
      }
      await this.#admitTurn(session);
      if (request.turn_id && session.turnMode === null) session.turnMode = 'explicit';
      const created = createTurn(turnId, fingerprint, request.messages, request.metadata ?? null);
      session.turns.set(turnId, created);
      session.order.push(turnId);
      session.activeTurnId = turnId;
      session.turnCount += 1;
      session.updatedAt = now();
      void this.#runTurn(session, created, content);
      return { turn: created, replay: false };
    });
    if (request.mode === 'async') {
      return {
        status: 202,
        body: {
          session_id: session.id,
          instance_id: session.instanceId,
          turn_id: turn.id,
          status: turn.status,
          idempotent_replay: replay,
        },
      };
    }
    await turn.done;
    return syncResult(session, turn, replay);
  }

  // A new turn may start: the session is live, under max_turns, with no turn running, and its agent
  // backend is healthy.
  async #admitTurn(session: BoundSession): Promise<void> {
    if (session.state === 'aborted')
      throw new BlackboxHttpError({
        status: 409,
        error: 'session_aborted',
        message: 'Session was aborted',
      });
    if (session.state === 'desynced')
      throw new BlackboxHttpError({
        status: 409,
        error: 'session_desynced',
        message: 'Session is desynced',
      });
    const maxTurns = this.#binding.effective.max_turns;
    if (session.turnCount >= maxTurns) {
      throw new BlackboxHttpError({
        status: 429,
        error: 'too_many_requests',
        message: `Session reached max_turns (${maxTurns})`,
      });
    }
    if (session.activeTurnId) {
      const active = session.turns.get(session.activeTurnId);
      if (active && !isTerminal(active.status)) {
        throw new BlackboxHttpError({
          status: 409,
          error: 'conflict',
          message: 'Another turn is active',
          details: {
            active_turn_id: active.id,
          },
        });
      }
    }
    if (!(await this.#binding.healthy())) {
      this.#binding.markBackendFailed('the agent backend failed its health check before a turn');
      throw new BlackboxHttpError({
        status: 503,
        error: 'backend_unavailable',
        message: 'Agent backend is not healthy',
      });
    }
  }

  /** `GET /v1/sessions/{id}/turns/{turn}`, waiting up to `wait` seconds (at most 60) for it to end. */
  async turnStatus(sessionId: string, turnId: string, wait: string | null): Promise<BlackboxTurn> {
    const session = this.boundSession(sessionId);
    const turn = session.turns.get(turnId);
    if (!turn) throw unknownTurn(turnId);
    const seconds = Math.min(Math.max(Number(wait ?? 0) || 0, 0), 60);
    if (seconds > 0 && !isTerminal(turn.status))
      await Promise.race([turn.done, sleep(seconds * 1000, { unref: true })]);
    return turnBody(session, turn);
  }

  /** `POST /v1/sessions/{id}/turns/{turn}/cancel`. */
  cancel(sessionId: string, turnId: string): BlackboxCancelResponse {
    const session = this.boundSession(sessionId);
    const turn = session.turns.get(turnId);
    if (!turn) throw unknownTurn(turnId);
    let status: BlackboxCancelResponse['status'] = turn.status;
    if (!isTerminal(turn.status)) {
      turn.cancelRequested = true;
      this.#stopTurn(turn, {
        error: 'cancelled',
        message: 'Turn was cancelled',
        details: {},
        http_status: 499,
      });
      status = turn.status === 'queued' ? 'cancelled' : 'cancel_requested';
    }
    return {
      session_id: session.id,
      instance_id: session.instanceId,
      turn_id: turn.id,
      status,
      state: session.state,
    };
  }

  /** `POST /v1/sessions/{id}/abort`: ends the session; an active turn fails with `aborted`. */
  async abort(sessionId: string): Promise<BlackboxAbortResponse> {
    const session = this.boundSession(sessionId);
    const mode = session.state === 'aborted' ? 'noop' : 'best_effort';
    session.state = 'aborted';
    const active = session.activeTurnId ? session.turns.get(session.activeTurnId) : undefined;
    if (active && !isTerminal(active.status)) {
      this.#stopTurn(active, {
        error: 'aborted',
        message: 'Session was aborted during the turn',
        details: {},
        http_status: 409,
      });
      await active.done;
    } else if (mode === 'best_effort') {
      await this.#binding.adapter?.abort().catch(() => undefined);
    }
    session.updatedAt = now();
    return {
      session_id: session.id,
      instance_id: session.instanceId,
      action: 'abort',
      state: session.state,
      mode,
    };
  }

  /** `GET /v1/sessions/{id}` with the optional history, turns and trace. */
  session(sessionId: string, query: URLSearchParams): BlackboxSessionResponse {
    const session = this.boundSession(sessionId);
    const flag = (name: string) => ['1', 'true', 'yes'].includes((query.get(name) ?? '').toLowerCase());
    const latest = session.order.at(-1);
    const turns = session.order.flatMap((id) => {
      const turn = session.turns.get(id);
      return turn ? [turn] : [];
    });
    return {
      session_id: session.id,
      instance_id: session.instanceId,
      state: session.state,
      turn_count: session.turnCount,
      active_turn_id:
        session.activeTurnId && !isTerminal(session.turns.get(session.activeTurnId)?.status ?? 'unknown')
          ? session.activeTurnId
          : null,
      latest_turn_id: latest ?? null,
      created_at: session.createdAt,
      updated_at: session.updatedAt,
      ...(flag('include_history') ? { history: session.history } : {}),
      ...(flag('include_turns') ? { turns: turns.map((turn) => turnBody(session, turn)) } : {}),
      ...(flag('include_trace')
        ? { trace: session.order.map((id) => ({ turn_id: id, status: session.turns.get(id)?.status })) }
        : {}),
    };
  }

  async #withLock<T>(session: BoundSession, work: () => Promise<T>): Promise<T> {
    const previous = session.lock;
    let release!: () => void;
    session.lock = new Promise<void>((resolve) => {
      release = resolve;
    });
    await previous;
    try {
      return await work();
    } finally {
      release();
    }
  }

  #resolveTurnId(session: BoundSession, explicit: string | null): string {
    if (explicit === null) {
      if (session.turnMode === 'explicit') {
        throw new BlackboxHttpError({
          status: 400,
          error: 'request_error',
          message: 'This session uses explicit turn ids: turn_id is required',
          details: {
            errors: [{ path: 'turn_id', message: 'required' }],
          },
        });
      }
      if (session.singleTurnId === null) {
        session.turnMode = 'single';
        session.singleTurnId = `turn-${randomBytes(8).toString('hex')}`;
      }
      return session.singleTurnId;
    }
    if (session.turnMode === 'single' && explicit !== session.singleTurnId) {
      throw new BlackboxHttpError({
        status: 409,
        error: 'conflict',
        message: 'This session is in single-turn mode',
        details: {
          turn_id: session.singleTurnId,
        },
      });
    }
    return explicit;
  }

  #stopTurn(turn: Turn, reason: TurnError): void {
    if (isTerminal(turn.status)) return;
    turn.stopReason ??= reason;
    turn.controller.abort();
  }

  #activeMs(startTotalPaused: number, startedAt: number): number {
    return Date.now() - startedAt - (this.#pause.totalPausedMs() - startTotalPaused);
  }

  async #runTurn(session: BoundSession, turn: Turn, text: string): Promise<void> {
    const adapter = this.#binding.adapter;
    const proxy = this.#binding.llmProxy;
    if (adapter === null || proxy === null) {
      turn.status = 'unknown';
      turn.error = {
        error: 'backend_error',
        message: 'Backend request failed: the agent backend is not running',
        details: {},
        http_status: 502,
      };
      turn.finish();
      return;
    }
    const effective = this.#binding.effective;
    turn.status = 'inflight';
    turn.updatedAt = now();
    proxy.openTurn(turn.id);
    const budgetMs = effective.backend_timeout * 1000;
    const startedAt = Date.now();
    const pausedAtStart = this.#pause.totalPausedMs();
    let timer: NodeJS.Timeout | undefined;
    // Paused time does not count against the backend timeout: re-arm until the active time is spent.
    const arm = () => {
      const left = budgetMs - this.#activeMs(pausedAtStart, startedAt);
      if (left <= 0 && !this.#pause.paused) {
        this.#stopTurn(turn, {
          error: 'backend_timeout',
          message: `Backend did not finish within ${effective.backend_timeout} s`,
          details: { backend_timeout: effective.backend_timeout },
          http_status: 504,
        });
        return;
      }
      timer = setTimeout(arm, Math.max(left, 50));
    };
    arm();
    let result: AdapterTurnResult | null = null;
    let failure: unknown = null;
    try {
      const run = adapter.runTurn({ turnId: turn.id, text, signal: turn.controller.signal });
      const stopped = new Promise<null>((resolve) =>
        turn.controller.signal.addEventListener('abort', () => resolve(null), { once: true }),
      );
      result = await Promise.race([run, stopped]);
      if (result === null) run.catch(() => undefined);
    } catch (error) {
      failure = error;
    } finally {
      if (timer) clearTimeout(timer);
    }
    const counters = proxy.closeTurn();
    const incident = counters?.incident ?? null;
    const usage: TurnUsage = {
      ...emptyUsage(),
      input_tokens: counters?.inputTokens ?? 0,
      output_tokens: counters?.outputTokens ?? 0,
      reasoning_tokens: counters?.reasoningTokens ?? 0,
      steps: counters?.steps ?? 0,
    };
    usage.total_tokens = usage.input_tokens + usage.output_tokens;
    turn.updatedAt = now();

    let error: TurnError | null = turn.stopReason;
    if (error === null && incident !== null) error = incidentError(incident);
    if (error === null && failure instanceof AgentTurnError) {
      error = {
        error: failure.error,
        message: failure.message,
        details: failure.details,
        http_status: failure.httpStatus,
      };
    }
    if (error === null && failure !== null) {
      const message = failure instanceof Error ? failure.message : String(failure);
      error = {
        error: 'backend_error',
        message: `Backend request failed: ${message}`,
        details: {},
        http_status: 502,
      };
    }
    if (error === null && result !== null) {
      turn.status = 'committed';
      turn.outputs = result.outputs;
      usage.tool_calls = result.outputs.reduce(
        (count, message) => count + (Array.isArray(message.tool_calls) ? message.tool_calls.length : 0),
        0,
      );
      turn.usage = usage;
      turn.backend = { type: adapter.type, backend_session_id: result.backendSessionId };
      session.history.push(...turn.messages, ...result.outputs);
    } else {
      // A race that neither produced a result nor failed was stopped: stopReason is set then.
      const final: TurnError = error ?? {
        error: 'backend_error',
        message: 'Backend request failed: the agent returned nothing',
        details: {},
        http_status: 502,
      };
      turn.usage = usage;
      turn.error = final;
      if (final.error === 'cancelled') turn.status = 'cancelled';
      else {
        turn.status = 'unknown';
        if (final.error === 'aborted') session.state = 'aborted';
        else if (session.state !== 'aborted') session.state = 'desynced';
        await adapter.abort().catch(() => undefined);
        if (final.error !== 'server_shutdown') {
          void this.#binding.healthy().then((ok) => {
            if (!ok && this.#binding.status === 'ready')
              this.#binding.markBackendFailed('the agent backend is unhealthy after a failed turn');
          });
        }
      }
    }
    session.updatedAt = now();
    turn.finish();
  }
}

/** One turn as the API reports it. */
export function turnBody(session: BoundSession, turn: Turn): BlackboxTurn {
  return {
    session_id: session.id,
    instance_id: session.instanceId,
    turn_id: turn.id,
    status: turn.status,
    state: session.state,
    ...(turn.outputs ? { outputs: turn.outputs } : {}),
    ...(turn.usage ? { usage: turn.usage } : {}),
    ...(turn.backend ? { backend: turn.backend } : {}),
    ...(turn.error ? { error: turn.error } : {}),
    created_at: turn.createdAt,
    updated_at: turn.updatedAt,
  };
}

function createTurn(
  id: string,
  fingerprint: string,
  messages: BlackboxMessage[],
  metadata: Record<string, unknown> | null,
): Turn {
  let finish!: () => void;
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const created = now();
  return {
    id,
    fingerprint,
    messages,
    metadata,
    status: 'queued',
    outputs: null,
    usage: null,
    backend: null,
    error: null,
    createdAt: created,
    updatedAt: created,
    done,
    finish,
    controller: new AbortController(),
    stopReason: null,
    cancelRequested: false,
  };
}

// The one non-empty user message a turn takes (the reference's rule), and in async mode its turn id.
function userTextOf(request: z.output<typeof messagesRequestSchema>): string {
  const [message] = request.messages;
  const content = message?.content;
  if (
    request.messages.length !== 1 ||
    message?.role !== 'user' ||
    typeof content !== 'string' ||
    content.trim() === ''
  ) {
    throw new BlackboxHttpError({
      status: 400,
      error: 'request_error',
      message: 'Exactly one user message with non-empty text content is required',
      details: {
        errors: [{ path: 'messages', message: 'exactly one non-empty user message' }],
      },
    });
  }
  if (request.mode === 'async' && !request.turn_id) {
    throw new BlackboxHttpError({
      status: 400,
      error: 'request_error',
      message: 'Async messages require a turn_id',
      details: {
        errors: [{ path: 'turn_id', message: 'required in async mode' }],
      },
    });
  }
  return content;
}

// The answer of a sync turn: its outputs once committed, else its error.
function syncResult(session: BoundSession, turn: Turn, replay: boolean): MessagesResult {
  const { outputs, backend, usage } = turn;
  if (turn.status !== 'committed' || outputs === null || backend === null || usage === null) {
    const error = turn.error ?? {
      error: 'internal_error',
      message: `Turn ${turn.id} ended ${turn.status} without an error`,
      details: {},
      http_status: 500,
    };
    throw new BlackboxHttpError({
      status: error.http_status,
      error: error.error,
      message: error.message,
      details: error.details,
    });
  }
  return {
    status: 200,
    body: {
      session_id: session.id,
      instance_id: session.instanceId,
      turn_id: turn.id,
      state: session.state,
      idempotent_replay: replay,
      outputs,
      backend,
      usage,
    },
  };
}
