import { randomBytes, randomUUID } from 'node:crypto';
import { expandSegmentsToSamples, markAbortedNoGrad } from '@dressage/multi-segment';
import {
  blackboxExecuteCommandsSchema,
  type DiscardResponse,
  DressageError,
  type FinalizeResponse,
  type Sample,
  type Segment,
} from '@dressage/protocol';
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
import type { SandboxLease, SandboxProvider } from '@dressage/sandbox';
import { sandboxPaths } from '@dressage/sandbox/internal';
import type { z } from 'zod';
import type { BlackboxMessage, BlackboxRegisterRequest } from '../blackbox/schemas.js';

/**
 * The proxy calls a paddock needs. `@dressage/proxy`'s `ProxyClient` satisfies it structurally.
 */
export interface TrajectoryProxy {
  finalizeSession(
    sessionId: string,
    options?: { instanceId?: string; label?: unknown },
  ): Promise<FinalizeResponse>;
  /** One trajectory's segments, token data in typed arrays. */
  readTrajectory(options: { trajectoryId: string; drain?: boolean }): Promise<{ data: Segment[] }>;
  discardSession(sessionId: string): Promise<DiscardResponse>;
}

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

/** Options of {@link createBlackboxGenerate}. */
export interface BlackboxGenerateOptions {
  provider: SandboxProvider;
  proxy: TrajectoryProxy;
  /** The Dressage proxy URL the sandboxed agent reaches. Default `DRESSAGE_PROXY_URL`. */
  proxyUrl?: string;
  /** Default `DRESSAGE_BLACKBOX_TYPE`, else `opencode`. */
  blackboxType?: string;
  backendOptions?: BlackboxRegisterRequest['backend_options'];
  /**
   * The agent's system prompt: written into the sandbox's server runtime directory and registered
   * as `system_prompt_file` (the adapter gives it to the agent in place of its own).
   */
  systemPrompt?: string | null;
  serverConfig?: NonNullable<BlackboxRegisterRequest['server_config']>;
  retry?: RetryOptions;
  /** slime's `--max-tokens-per-gpu`: segments longer than `maxTokensPerGpu × contextParallelSize` are truncated. */
  maxTokensPerGpu?: number | null;
  /** slime's `--context-parallel-size` (the token cap's factor). Default 1. */
  contextParallelSize?: number | null;
  /** Mask trainable tokens of older weight versions (`expandSegmentsToSamples`). */
  maskNonlastVersionTokens?: boolean;
  /** Routing replay (R3): decode each segment's routed experts to this model shape. */
  routingReplay?: { numLayers: number; moeRouterTopk: number } | null;
}

const semanticErrors = new Set(['backend_timeout', 'context_overflow', 'max_steps_exceeded']);
const harvested = new Set(['context_overflow', 'max_steps_exceeded']);

/**
 * The blackbox generate function: per sample, lease a sandbox running a BlackboxServer, register the
 * agent against the Dressage proxy, run the before-agent commands, call the agent (async, polled),
 * run the after-agent commands, finalize and read the trajectory, and expand it into samples. The
 * sandbox is always released. Context overflow and max steps are harvested (the partial trajectory
 * trains); any other failure yields a no-gradient placeholder.
 */
export function createBlackboxGenerate(options: BlackboxGenerateOptions) {
  return async (sample: Sample): Promise<Sample[]> => {
    const sessionId = `bbs-${randomUUID()}`;
    const instanceId = String(sample.metadata.instance_id ?? sample.group_index ?? randomUUID());
    const metadata: Sample['metadata'] = { ...sample.metadata, instance_id: instanceId };
    let lease: SandboxLease | null = null;
    const abort = async (reason: string, extra: Sample['metadata'] = {}): Promise<Sample[]> => {
      const history = Array.isArray(metadata.blackbox_failure_history)
        ? [...(metadata.blackbox_failure_history as unknown[])]
        : [];
      history.push({ session_id: sessionId, reason, ...extra });
      await options.proxy.discardSession(sessionId).catch(() => undefined);
      return [
        markAbortedNoGrad(
          { ...sample, metadata: { ...metadata, ...extra, blackbox_failure_history: history } },
          { sessionId, instanceId },
        ),
      ];
    };
    try {
      lease = await options.provider.create({
        trajectoryId: sessionId,
        sessionId,
        services: [{ name: 'blackbox', port: 31000, healthPath: '/health' }],
        metadata: { paddock_mode: 'blackbox' },
      });
      const endpoint =
        lease.endpoints.blackbox?.url ?? (await options.provider.getPublicUrl(lease, 31000, 'blackbox'));
      const client = new BlackboxClient(endpoint, options.retry, lease.endpoints.blackbox?.headers ?? {});
      let systemPromptFile: string | null = null;
      if (options.systemPrompt) {
        systemPromptFile = `${sandboxPaths.runtime}/system-prompt.txt`;
        await options.provider.writeFile(lease, systemPromptFile, options.systemPrompt);
      }
      await client.register({
        blackbox_type: options.blackboxType ?? process.env.DRESSAGE_BLACKBOX_TYPE ?? 'opencode',
        router: options.proxyUrl ?? process.env.DRESSAGE_PROXY_URL ?? 'http://127.0.0.1:8800',
        bound_session_id: sessionId,
        bound_instance_id: instanceId,
        bound_sandbox_id: lease.sandboxId,
        backend_options: options.backendOptions ?? {},
        ...(systemPromptFile === null ? {} : { system_prompt_file: systemPromptFile }),
        server_config: { backend_timeout: 1800, ...options.serverConfig },
      });
      const commands = blackboxExecuteCommandsSchema.parse(metadata.blackbox_execute_cmds ?? {});
      const results: (Awaited<ReturnType<BlackboxClient['executeCommand']>> & {
        stage: string;
        name: string;
      })[] = [];
      const runStage = async (stage: 'before_agent' | 'after_agent') => {
        for (const command of commands[stage] ?? []) {
          const result = await client.executeCommand(sessionId, command.cmd, command.timeout);
          const stdout = String(result.stdout ?? '');
          results.push({
            stage,
            name: command.name,
            ...result,
            stdout: command.stdout_limit ? stdout.slice(0, command.stdout_limit) : stdout,
          });
          if (command.required && (result.returncode !== 0 || result.timed_out === true)) {
            throw new BlackboxCallError(500, {
              error: 'execute_cmd_failed',
              message: `required command ${command.name} failed`,
            });
          }
        }
      };
      await runStage('before_agent');
      const prompt = sample.prompt;
      const messages: readonly BlackboxMessage[] =
        typeof prompt === 'string' ? [{ role: 'user', content: prompt }] : prompt;
      let agentResponse: string | null = null;
      try {
        const turn = await client.callAgent(sessionId, messages);
        const last = (turn.outputs ?? []).findLast((message) => message.role === 'assistant');
        agentResponse = typeof last?.content === 'string' ? last.content : null;
      } catch (error) {
        if (!(error instanceof BlackboxCallError) || !harvested.has(error.error)) {
          const kind = error instanceof BlackboxCallError ? error.error : 'transport_error';
          const expected =
            error instanceof Error && error.message.includes('Dressage proxy generation_preempted');
          return await abort(error instanceof Error ? error.message : String(error), {
            blackbox_agent_error_kind: kind,
            ...(error instanceof BlackboxCallError ? { blackbox_agent_http_status_code: error.status } : {}),
            ...(semanticErrors.has(kind) ? { blackbox_agent_semantic_error: true } : {}),
            ...(expected ? { blackbox_expected_abort: true } : {}),
          });
        }
        Object.assign(metadata, {
          blackbox_agent_early_stop: true,
          blackbox_agent_early_stop_kind: error.error,
          blackbox_agent_error_kind: error.error,
          blackbox_agent_http_status_code: error.status,
          blackbox_agent_error_details: error.body.details ?? {},
        });
      }
      await runStage('after_agent');
      metadata.execute_cmds = results;
      await options.proxy.finalizeSession(sessionId, { instanceId, label: sample.label ?? undefined });
      const read = await options.proxy.readTrajectory({ trajectoryId: sessionId, drain: true });
      if (read.data.length === 0) return await abort('the proxy recorded no segments');
      return expandSegmentsToSamples({ ...sample, session_id: sessionId, metadata }, read.data, {
        sessionId,
        instanceId,
        agentResponse,
        maxTokensPerGpu: options.maxTokensPerGpu ?? null,
        contextParallelSize: options.contextParallelSize ?? null,
        maskNonlastVersionTokens: options.maskNonlastVersionTokens ?? false,
        ...(options.routingReplay ? { useRolloutRoutingReplay: true, ...options.routingReplay } : {}),
      });
    } catch (error) {
      return await abort(error instanceof Error ? error.message : String(error), {
        blackbox_agent_error_kind: error instanceof BlackboxCallError ? error.error : 'paddock_error',
      });
    } finally {
      if (lease) await options.provider.terminate(lease).catch(() => undefined);
    }
  };
}
