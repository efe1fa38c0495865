import type { BlackboxExecuteCommandResponse } from '@dressage/protocol/blackbox';
import { runProcessGroup } from '@dressage/sandbox/internal';
import { BlackboxHttpError, parseBody } from './http-error.js';
import { executeCommandRequestSchema } from './schemas.js';
import { type BoundSession, isTerminal } from './turns.js';

/** What `execute_cmd` needs from the server. */
export interface ExecuteCommandContext {
  /** Commands run only inside a sandbox: outside one they would run as the server user on the host. */
  insideSandbox: boolean;
  /** Seconds a command may run when the request names no timeout. */
  defaultTimeout: number;
  /** Where commands run (the agent's working directory). */
  workDir: string;
  /** The bound session (throws the API's 404/409 for another id). */
  session(): BoundSession;
}

/**
 * `POST /v1/sessions/{id}/execute_cmd`: runs one shell command in the agent's working directory
 * between turns (for reward computation), never while a turn runs or on an aborted session. A
 * desynced session still answers when its last turn hit the context or step limit, so the
 * rollout's work can be harvested.
 */
export async function executeCommand(
  body: unknown,
  context: ExecuteCommandContext,
): Promise<BlackboxExecuteCommandResponse> {
  const request = parseBody(executeCommandRequestSchema, body, 'execute_cmd request');
  if (/[\n\r\0]/.test(request.cmd)) {
    throw new BlackboxHttpError({
      status: 400,
      error: 'request_error',
      message: 'cmd must be a single line',
      details: {
        errors: [{ path: 'cmd', message: 'newline, carriage return or NUL' }],
      },
    });
  }
  if (!context.insideSandbox) {
    throw new BlackboxHttpError({
      status: 403,
      error: 'forbidden',
      message:
        'execute_cmd runs commands only when the server runs inside a sandbox (BBS_INSIDE_SANDBOX=1): here they would run as the server user on the host',
    });
  }
  const session = context.session();
  const latestId = session.order.at(-1);
  const latest = latestId === undefined ? undefined : session.turns.get(latestId);
  if (latest && !isTerminal(latest.status)) {
    throw new BlackboxHttpError({
      status: 409,
      error: 'conflict',
      message: 'A turn is in progress',
      details: { active_turn_id: latest.id },
    });
  }
  if (session.state === 'aborted')
    throw new BlackboxHttpError({ status: 409, error: 'session_aborted', message: 'Session was aborted' });
  if (session.state === 'desynced') {
    const harvesting =
      latest?.error && ['context_overflow', 'max_steps_exceeded'].includes(latest.error.error);
    if (!harvesting)
      throw new BlackboxHttpError({ status: 409, error: 'session_desynced', message: 'Session is desynced' });
  }
  const timeout = request.timeout ?? context.defaultTimeout;
  let result: Awaited<ReturnType<typeof runProcessGroup>>;
  try {
    result = await runProcessGroup(['/bin/sh', '-lc', request.cmd], {
      cwd: context.workDir,
      timeoutMs: timeout * 1000,
    });
  } catch (error) {
    throw new BlackboxHttpError({
      status: 502,
      error: 'backend_error',
      message: `Failed to spawn the command: ${String(error)}`,
    });
  }
  return {
    session_id: session.id,
    instance_id: session.instanceId,
    cmd: request.cmd,
    stdout: result.stdout,
    stderr: result.stderr,
    returncode: result.timedOut ? -9 : result.returncode,
    timed_out: result.timedOut,
    duration_seconds: result.durationSeconds,
    started_at: result.startedAt.toISOString(),
    finished_at: result.finishedAt.toISOString(),
  };
}
