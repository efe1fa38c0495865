import type { IncomingMessage, ServerResponse } from 'node:http';
import type { BlackboxHealth } from '@dressage/protocol/blackbox';
import { decodePathParameter, RouteTable, requestPath, serve } from '@dressage/protocol/http';
import type { RolloutBinding } from './binding.js';
import { executeCommand } from './execute-command.js';
import { BlackboxHttpError } from './http-error.js';
import type { PauseControl } from './pause.js';
import { idPattern } from './schemas.js';
import type { TurnEngine } from './turns.js';

/** Package version reported by `/health`. */
export const blackboxServerVersion = '0.1.0';

/** What a route answers: a typed body, its status (200 unless said) and whether it is sent bare. */
export interface RouteResult {
  status?: number;
  body: object;
  /** Sent as is, without the `request_id` every other answer carries (`/health`). */
  bare?: boolean;
}

/** The parts the routes dispatch to. */
export interface BlackboxParts {
  binding: RolloutBinding;
  turns: TurnEngine;
  pause: PauseControl;
  workDir: string;
}

/** What a route handler gets: the parts, the parsed body, the path parameters and the query. */
interface RouteContext {
  parts: BlackboxParts;
  body: unknown;
  session: string;
  turn: string;
  query: URLSearchParams;
}

type RouteHandler = (context: RouteContext) => Promise<RouteResult> | RouteResult;

// A malformed escape, or a session id outside the id pattern, is the caller's error (400), not ours.
function decodeParameter(raw: string, name: string): string {
  const field = name === 'session' ? 'session_id' : 'turn_id';
  let value: string;
  try {
    value = decodePathParameter(raw, field);
  } catch {
    throw new BlackboxHttpError({
      status: 400,
      error: 'request_error',
      message: `Malformed %-encoding in ${field}`,
      details: {
        errors: [{ path: field, message: 'malformed percent-encoding' }],
      },
    });
  }
  if (name === 'session' && !idPattern.test(value)) {
    throw new BlackboxHttpError({
      status: 400,
      error: 'request_error',
      message: 'Invalid session id',
      details: {
        errors: [{ path: 'session_id', message: 'must match the id pattern' }],
      },
    });
  }
  return value;
}

/**
 * The BlackboxServer's route table: maps a method and path to the part that answers it. Malformed
 * ids are 400.
 */
export const blackboxRoutes = new RouteTable<RouteHandler>({ decodeParameter })
  .add('GET', '/health', ({ parts: { binding } }) => {
    const health: BlackboxHealth = {
      healthy: binding.status !== 'error' && binding.status !== 'shutting_down',
      version: blackboxServerVersion,
    };
    return { bare: true, body: health };
  })
  .add('GET', '/v1/status', ({ parts: { binding, turns } }) => ({
    body: binding.statusBody(turns.counts()),
  }))
  .add('POST', '/v1/rollout/register', async ({ parts, body }) => ({
    body: await parts.binding.register(body),
  }))
  .add('POST', '/v1/rollout/recycle', async ({ parts }) => ({ body: await parts.binding.recycle() }))
  .add('POST', '/v1/rollout/pause', async ({ parts, body }) => ({ body: await parts.pause.pause(body) }))
  .add('POST', '/v1/rollout/resume', async ({ parts, body }) => ({ body: await parts.pause.resume(body) }))
  .add('GET', '/v1/rollout/pause_state', ({ parts }) => ({ body: parts.pause.state() }))
  .add('POST', '/v1/sessions/{session}/messages', ({ parts, session, body }) =>
    parts.turns.messages(session, body),
  )
  .add('POST', '/v1/sessions/{session}/execute_cmd', async ({ parts, session, body }) => ({
    body: await executeCommand(body, {
      insideSandbox: parts.binding.config.inside_sandbox,
      defaultTimeout: parts.binding.effective.execute_cmd_timeout,
      workDir: parts.workDir,
      session: () => parts.turns.boundSession(session),
    }),
  }))
  .add('POST', '/v1/sessions/{session}/abort', async ({ parts, session }) => ({
    body: await parts.turns.abort(session),
  }))
  .add('GET', '/v1/sessions/{session}', ({ parts, session, query }) => ({
    body: parts.turns.session(session, query),
  }))
  .add('POST', '/v1/sessions/{session}/turns/{turn}/cancel', ({ parts, session, turn }) => ({
    body: parts.turns.cancel(session, turn),
  }))
  .add('GET', '/v1/sessions/{session}/turns/{turn}', async ({ parts, session, turn, query }) => ({
    body: await parts.turns.turnStatus(session, turn, query.get('wait')),
  }));

/** The path with trailing slashes removed, as every route matches it. */
export function routePath(url: URL): string {
  return requestPath(url.pathname);
}

/** How {@link blackboxListener} reads a request's body and answers a route's result or failure. */
export interface BlackboxListenerOptions {
  /** The JSON body of a request (undefined for GET), refused with the server's own 400 and 413. */
  readJson: (request: IncomingMessage, response: ServerResponse) => Promise<unknown>;
  /** Answers a route's result. */
  answer: (response: ServerResponse, result: RouteResult) => void;
  /** Answers a failure in the BlackboxServer envelope. */
  fail: (response: ServerResponse, error: unknown) => void;
}

/**
 * The request listener of the route table: each request's body read and its route run on the
 * parts. Unknown routes, and known paths with another method, are 404.
 */
export function blackboxListener(
  parts: BlackboxParts,
  options: BlackboxListenerOptions,
): (request: IncomingMessage, response: ServerResponse) => Promise<void> {
  return serve(blackboxRoutes, {
    invoke: async (handler, request, response, { session = '', turn = '' }) => {
      const body = await options.readJson(request, response);
      const query = new URL(request.url ?? '/', 'http://blackbox').searchParams;
      options.answer(response, await handler({ parts, body, session, turn, query }));
    },
    notFound: (request) => {
      request.resume();
      const { pathname } = new URL(request.url ?? '/', 'http://blackbox');
      throw new BlackboxHttpError({
        status: 404,
        error: 'not_found',
        message: `No route ${request.method ?? 'GET'} ${pathname}`,
      });
    },
    onError: (error, _request, response) => options.fail(response, error),
  });
}
