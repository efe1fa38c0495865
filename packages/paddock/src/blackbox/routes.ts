import type { BlackboxHealth } from '@dressage/protocol';
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

/** Decodes one %-encoded path segment; a malformed escape is the caller's error (400), not ours. */
function decodePathSegment(segment: string, field: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new BlackboxHttpError(400, 'request_error', `Malformed %-encoding in ${field}`, {
      errors: [{ path: field, message: 'malformed percent-encoding' }],
    });
  }
}

/** The path with trailing slashes removed, as every route matches it. */
export function routePath(url: URL): string {
  return url.pathname.replace(/\/+$/, '') || '/';
}

/**
 * The BlackboxServer's route table: maps a method and path to the part that answers it. Unknown
 * routes are 404; malformed ids are 400.
 */
export async function routeBlackbox(
  parts: BlackboxParts,
  method: string,
  url: URL,
  body: unknown,
): Promise<RouteResult> {
  const { binding, turns, pause } = parts;
  const path = routePath(url);
  if (method === 'GET' && path === '/health') {
    const health: BlackboxHealth = {
      healthy: binding.status !== 'error' && binding.status !== 'shutting_down',
      version: blackboxServerVersion,
    };
    return { bare: true, body: health };
  }
  if (method === 'GET' && path === '/v1/status') return { body: binding.statusBody(turns.counts()) };
  if (method === 'POST' && path === '/v1/rollout/register') return { body: await binding.register(body) };
  if (method === 'POST' && path === '/v1/rollout/pause') return { body: await pause.pause(body) };
  if (method === 'POST' && path === '/v1/rollout/resume') return { body: await pause.resume(body) };
  if (method === 'GET' && path === '/v1/rollout/pause_state') return { body: pause.state() };
  const match = /^\/v1\/sessions\/([^/]+)(?:\/(.*))?$/.exec(path);
  if (match?.[1] !== undefined) {
    const sessionId = decodePathSegment(match[1], 'session_id');
    const rest = match[2] ?? '';
    if (!idPattern.test(sessionId)) {
      throw new BlackboxHttpError(400, 'request_error', 'Invalid session id', {
        errors: [{ path: 'session_id', message: 'must match the id pattern' }],
      });
    }
    if (method === 'POST' && rest === 'messages') return turns.messages(sessionId, body);
    if (method === 'POST' && rest === 'execute_cmd') {
      return {
        body: await executeCommand(body, {
          insideSandbox: binding.config.inside_sandbox,
          defaultTimeout: binding.effective.execute_cmd_timeout,
          workDir: parts.workDir,
          session: () => turns.boundSession(sessionId),
        }),
      };
    }
    if (method === 'POST' && rest === 'abort') return { body: await turns.abort(sessionId) };
    if (method === 'GET' && rest === '') return { body: turns.session(sessionId, url.searchParams) };
    const turnMatch = /^turns\/([^/]+)(\/cancel)?$/.exec(rest);
    if (turnMatch?.[1] !== undefined) {
      const turnId = decodePathSegment(turnMatch[1], 'turn_id');
      if (method === 'POST' && turnMatch[2]) return { body: turns.cancel(sessionId, turnId) };
      if (method === 'GET' && !turnMatch[2])
        return { body: await turns.turnStatus(sessionId, turnId, url.searchParams.get('wait')) };
    }
  }
  throw new BlackboxHttpError(404, 'not_found', `No route ${method} ${url.pathname}`);
}
