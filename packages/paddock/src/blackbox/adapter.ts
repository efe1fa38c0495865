import { DressageError, issuesFromZodError } from '@dressage/protocol';
import type { BlackboxCapabilities } from '@dressage/protocol/blackbox';
import type { z } from 'zod';
import type { BlackboxMessage, ProxyOptions } from './schemas.js';

/** What the server tells an agent adapter at registration. */
export interface AdapterContext {
  /** Absolute directory the adapter may write (configs, logs, the agent's HOME). */
  runtimeDir: string;
  /** Where the agent works (its cwd): the sandbox work dir. */
  workDir: string;
  /** Origin of the in-process LLM proxy, e.g. `http://127.0.0.1:41234`; point the agent here. */
  proxyOrigin: string;
  /**
   * The API key the agent must send to the LLM proxy (as its OpenAI or Anthropic key): other
   * processes that reach the port, such as agents in other sandboxes, do not have it.
   */
  proxyApiKey: string;
  /** API path prefix of the model API, e.g. `/v1`. */
  apiPath: string;
  /** The system prompt file's content, when one was registered. */
  systemPrompt: string | null;
  /** Milliseconds the agent may wait on one model request. */
  routerTimeoutMs: number;
  /** The session the server is bound to. */
  sessionId: string;
  instanceId: string;
  /**
   * True when the server runs inside a sandbox (`BBS_INSIDE_SANDBOX=1`): only then may an adapter
   * let its agent run tools without asking.
   */
  insideSandbox?: boolean;
  /** Resolves once no model request is in flight through the LLM proxy. */
  drainModelRequests(): Promise<void>;
  /**
   * Tells the LLM proxy the agent's own session id of this sample and the request header the agent
   * sends it in (default `x-session-id`): requests of any other agent session are refused, so a
   * kept agent's requests for an earlier sample never land in this one's trajectory.
   */
  pinAgentSession?(agentSessionId: string, header?: string): void;
}

/** One turn handed to an adapter. */
export interface AdapterTurn {
  turnId: string;
  /** The user's message text. */
  text: string;
  /** Aborted when the turn is cancelled, aborted, timed out or hits max steps: stop the agent. */
  signal: AbortSignal;
}

/** What an agent produced in a turn. */
export interface AdapterTurnResult {
  /** New messages of the turn (assistant replies, tool calls and tool results). */
  outputs: BlackboxMessage[];
  /** The agent's own session id, when it has one. */
  backendSessionId: string | null;
}

/** Capabilities the server advertises for a backend. */
export type AdapterCapabilities = BlackboxCapabilities;

/** The capabilities of every built-in adapter. */
export const defaultCapabilities: AdapterCapabilities = {
  chat: true,
  abort: true,
  pause_resume: true,
  stream: false,
  multi_message_input: false,
  system_message: true,
  history_injection: false,
};

/**
 * Drives one agent (a CLI, a server) for the BlackboxServer. An adapter never talks to the model
 * directly: it points the agent at the LLM proxy in {@link AdapterContext.proxyOrigin}.
 */
export interface BlackboxAdapter {
  readonly type: string;
  readonly capabilities: AdapterCapabilities;
  /** Writes configs and starts long-lived processes. Throws {@link AdapterOptionsError} for bad options. */
  init(context: AdapterContext): Promise<void>;
  /** True when the agent can take a turn. */
  health(): Promise<boolean>;
  runTurn(turn: AdapterTurn): Promise<AdapterTurnResult>;
  /** Stops whatever the agent is doing (best effort); the session is not reused afterwards. */
  abort(): Promise<void>;
  /** Stops every process the adapter started. */
  close(): Promise<void>;
  /**
   * Drops everything of the sample just served (the agent's session, its history, what it wrote in
   * its home) while the agent keeps running, so that the next sample sees none of it. Adapters
   * without it are closed and started anew for every sample. Throws when the agent cannot be
   * reused (it is then closed and restarted).
   */
  recycle?(): Promise<void>;
  /** Binds a recycled agent to the next sample (same runtime dir, LLM proxy origin and key). */
  rebind?(context: AdapterContext): Promise<void>;
  /** The process groups of a kept agent: they survive the sweep of stray processes between samples. */
  processGroups?(): number[];
}

/** Builds an adapter from `backend_options` (without `proxy`). */
export type AdapterFactory = (options: unknown) => BlackboxAdapter;

/** Bad backend options or an agent protocol problem: the register call answers 400. */
export class AdapterOptionsError extends DressageError {
  /** The invalid fields, as the register call's 400 lists them. */
  readonly errors: unknown[];

  constructor(message: string, errors: unknown[] = []) {
    super({ code: 'invalid_argument', message, details: { errors } });
    this.name = 'AdapterOptionsError';
    this.errors = errors;
  }
}

/**
 * An adapter's `backend_options`, parsed with its schema.
 * @throws AdapterOptionsError naming every invalid field (the register call answers 400).
 */
export function parseAdapterOptions<Schema extends z.ZodType>(
  schema: Schema,
  options: unknown,
  adapterType: string,
): z.output<Schema> {
  const parsed = schema.safeParse(options);
  if (!parsed.success)
    throw new AdapterOptionsError(`Invalid ${adapterType} backend_options`, issuesFromZodError(parsed.error));
  return parsed.data;
}

/** Turn outcomes an agent can report itself, with their status in the turn error table. */
export const agentTurnErrorStatus = {
  context_overflow: 413,
  max_steps_exceeded: 429,
  backend_error: 502,
  backend_timeout: 504,
} as const;

/**
 * A failure the agent reported in its own terms (its step limit, its context limit, its model call
 * failing), mapped onto the turn error table. Thrown from {@link BlackboxAdapter.runTurn}; any other
 * error is a 502 `backend_error`.
 */
export class AgentTurnError extends DressageError {
  constructor(
    readonly error: keyof typeof agentTurnErrorStatus,
    message: string,
    details: Record<string, unknown> = {},
  ) {
    super({ code: 'unavailable', message, details });
    this.name = 'AgentTurnError';
  }

  /** The turn error table's status (not the generic `unavailable` one). */
  override get httpStatus(): number {
    return agentTurnErrorStatus[this.error];
  }
}

/** Options every adapter receives besides its own. */
export interface AdapterProxySettings {
  proxy: ProxyOptions;
}

/** Backend types the BlackboxServer knows of (some may not be implemented). */
export const knownBackends = ['opencode', 'openclaw', 'claude_code', 'codex', 'qwen_code'] as const;
