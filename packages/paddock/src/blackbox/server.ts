import { createHash, randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { access, chmod, copyFile, mkdir, readFile, realpath, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import { bearerMatches, issuesFromZodError, reachableHost } from '@dressage/protocol';
import type { z } from 'zod';
import { runProcessGroup } from '../sandbox/process-group.js';
import { type SocketPipe, startSocketPipe } from '../sandbox/socket-pipe.js';
import {
  type AdapterCapabilities,
  type AdapterFactory,
  AdapterOptionsError,
  type BlackboxAdapter,
  defaultCapabilities,
  knownBackends,
} from './adapter.js';
import { type BlackboxServerConfig, defaultBlackboxConfig } from './config.js';
import { type ProxyIncident, RolloutLlmProxy } from './llm-proxy.js';
import {
  type BlackboxMessage,
  emptyUsage,
  executeCommandRequestSchema,
  idPattern,
  messagesRequestSchema,
  pauseRequestSchema,
  proxyOptionsSchema,
  type RegisterRequest,
  registerRequestSchema,
  resumeRequestSchema,
  type TurnUsage,
} from './schemas.js';

/** Package version reported by `/health`. */
export const blackboxServerVersion = '0.1.0';

/** An error answered with the BlackboxServer envelope `{request_id, error, message, details}`. */
export class BlackboxHttpError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'BlackboxHttpError';
  }
}

/** Overall server state. */
export type ServerStatus = 'idle' | 'initializing' | 'ready' | 'error' | 'shutting_down';
/** Session state. */
export type SessionState = 'active' | 'desynced' | 'aborted';
/** Turn status. */
export type TurnStatus = 'queued' | 'inflight' | 'committed' | 'failed' | 'cancelled' | 'unknown';

interface TurnError {
  error: string;
  message: string;
  details: Record<string, unknown>;
  http_status: number;
}

interface Turn {
  id: string;
  fingerprint: string;
  messages: BlackboxMessage[];
  metadata: Record<string, unknown> | null;
  status: TurnStatus;
  outputs: BlackboxMessage[] | null;
  usage: TurnUsage | null;
  backend: { type: string; backend_session_id: string | null } | null;
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

interface Session {
  id: string;
  instanceId: string;
  state: SessionState;
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

interface Binding {
  runtime_id: string;
  blackbox_type: string;
  router_raw: string;
  router_base_url: string;
  router_api_path: string;
  bound_session_id: string;
  bound_instance_id: string;
  bound_sandbox_id: string | null;
  system_prompt: { source_file: string; runtime_file: string; applies_to: string } | null;
  runtime_dir: string;
  registered_at: string;
  backend_options: Record<string, unknown>;
}

/** Options of {@link BlackboxServer}. */
export interface BlackboxServerOptions {
  config?: Partial<BlackboxServerConfig>;
  /** Adapters by backend type; the built-in ones are added by the CLI. */
  adapters?: Record<string, AdapterFactory>;
  /** The agent's working directory. Default `process.cwd()`. */
  workDir?: string;
  /**
   * Bearer key every route but `/health` requires (compared in constant time). Without one, anyone
   * who reaches the port drives the server: keep it on loopback.
   */
  apiKey?: string;
  /**
   * Listen on this unix socket instead of `host:port`: a pool slot in its own network namespace,
   * reached by the pool through the socket in the slot's directory.
   */
  socketPath?: string;
  /**
   * Send every upstream model request (whatever `router` a registration names) through this unix
   * socket: in a slot's own network namespace it is the only way out, and the pool's end of it
   * connects only to the recording proxy it was configured with.
   */
  upstreamSocket?: string;
}

const now = () => new Date().toISOString();
const requestId = () => `req-${randomBytes(4).toString('hex')}`;

function dropNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(dropNulls);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      const inner = (value as Record<string, unknown>)[key];
      if (inner === null || inner === undefined) continue;
      out[key] = dropNulls(inner);
    }
    return out;
  }
  return value;
}

/** sha256 of canonical JSON (sorted keys, null-valued keys dropped). */
export function fingerprintOf(value: unknown): string {
  return createHash('sha256')
    .update(JSON.stringify(dropNulls(value)))
    .digest('hex');
}

function validation(error: z.ZodError, where: string): BlackboxHttpError {
  return new BlackboxHttpError(400, 'request_error', `Invalid ${where}`, {
    errors: issuesFromZodError(error),
  });
}

function parseBody<T extends z.ZodType>(schema: T, body: unknown, where: string): z.output<T> {
  const result = schema.safeParse(body);
  if (!result.success) throw validation(result.error, where);
  return result.data;
}

/** Normalises a router address: adds `http://`, and lets a path in it override the API path. */
export function normalizeRouter(router: string, apiPath: string): { base: string; apiPath: string } {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(router) ? router : `http://${router}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new BlackboxHttpError(400, 'request_error', `router is not a valid URL: ${router}`, {
      errors: [{ path: 'router', message: 'not a URL' }],
    });
  }
  const path = url.pathname.replace(/\/+$/, '');
  const chosen = path !== '' ? path : apiPath === '' ? '' : `/${apiPath.replace(/^\/+|\/+$/g, '')}`;
  return { base: url.origin, apiPath: chosen === '/' ? '' : chosen };
}

/**
 * The BlackboxServer: an HTTP server bound to one rollout session that drives a third-party agent
 * through an adapter, with every model call going through an in-process LLM proxy. Wire-compatible
 * with the reference (routes, payloads, statuses and the turn error table).
 *
 * @example
 * ```ts
 * const server = new BlackboxServer({ adapters: builtinAdapters, config: { port: 23456 } });
 * await server.listen();
 * ```
 */
export class BlackboxServer {
  readonly config: BlackboxServerConfig;
  private readonly adapters: Record<string, AdapterFactory>;
  private readonly workDir: string;
  private readonly apiKey: string | null;
  private readonly socketPath: string | null;
  private readonly upstreamSocket: string | null;
  private upstreamPipe: Promise<SocketPipe> | null = null;
  private http: Server | null = null;
  private status: ServerStatus = 'idle';
  private binding: Binding | null = null;
  private fingerprint: string | null = null;
  private effective: BlackboxServerConfig;
  private adapter: BlackboxAdapter | null = null;
  private llmProxy: RolloutLlmProxy | null = null;
  private readonly sessions = new Map<string, Session>();
  private paused = false;
  private pauseReason: string | null = null;
  private version: string | null = null;
  private pausedSince: number | null = null;
  private pausedTotalMs = 0;
  private resumeWaiters: (() => void)[] = [];
  private httpInflight = 0;
  private healthTimer: NodeJS.Timeout | null = null;
  private lastError: string | null = null;

  constructor(options: BlackboxServerOptions = {}) {
    this.config = { ...defaultBlackboxConfig, ...options.config };
    this.effective = this.config;
    this.adapters = options.adapters ?? {};
    this.workDir = options.workDir ?? process.cwd();
    this.apiKey = options.apiKey ?? null;
    this.socketPath = options.socketPath ?? null;
    this.upstreamSocket = options.upstreamSocket ?? null;
  }

  /** Starts listening; returns the base URL to reach it from this machine. */
  async listen(): Promise<string> {
    const server = createServer((request, response) => void this.dispatch(request, response));
    const socketPath = this.socketPath;
    if (socketPath !== null) await rm(socketPath, { force: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      if (socketPath !== null) server.listen(socketPath, () => resolve());
      else server.listen(this.config.port, this.config.host, () => resolve());
    });
    this.http = server;
    if (socketPath !== null) {
      await chmod(socketPath, 0o600);
      return `unix:${socketPath}`;
    }
    const address = server.address() as AddressInfo;
    return `http://${reachableHost(this.config.host)}:${address.port}`;
  }

  /**
   * `address:port` the socket is bound to (`0.0.0.0:23456` when it listens on every interface), or
   * `unix:<path>`.
   */
  get boundAddress(): string | null {
    const address = this.http?.address();
    if (typeof address === 'string') return `unix:${address}`;
    if (address === null || address === undefined) return null;
    return `${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
  }

  /** Fails active turns with `server_shutdown`, stops the agent and the proxy, closes the socket. */
  async close(): Promise<void> {
    this.status = 'shutting_down';
    if (this.healthTimer) clearInterval(this.healthTimer);
    const pending: Promise<void>[] = [];
    for (const session of this.sessions.values()) {
      const turn = session.activeTurnId ? session.turns.get(session.activeTurnId) : undefined;
      if (turn && !isTerminal(turn.status)) {
        this.stopTurn(turn, {
          error: 'server_shutdown',
          message: 'Server shut down during the turn',
          details: {},
          http_status: 504,
        });
        pending.push(turn.done);
      }
    }
    this.resumeAll();
    await Promise.race([Promise.all(pending), sleep(this.config.shutdown_timeout * 1000)]);
    await this.teardownBackend();
    const http = this.http;
    this.http = null;
    if (http) {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    }
    const pipe = this.upstreamPipe;
    this.upstreamPipe = null;
    if (pipe) await (await pipe.catch(() => null))?.close();
  }

  // With an upstream socket, model requests go to a loopback port of this network namespace that is
  // piped to the socket (fetch cannot dial a unix socket); the registered router keeps its path.
  private async upstreamOrigin(routerBase: string): Promise<string> {
    const socket = this.upstreamSocket;
    if (socket === null) return routerBase;
    this.upstreamPipe ??= startSocketPipe({
      listen: { host: '127.0.0.1', port: 0 },
      target: { path: socket },
    });
    const pipe = await this.upstreamPipe.catch((error: unknown) => {
      this.upstreamPipe = null;
      throw error;
    });
    return `http://127.0.0.1:${pipe.port}`;
  }

  // ---------------------------------------------------------------- HTTP plumbing

  private async dispatch(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const id = requestId();
    response.setHeader('x-request-id', id);
    this.httpInflight += 1;
    try {
      const url = new URL(request.url ?? '/', 'http://blackbox');
      const health = request.method === 'GET' && url.pathname.replace(/\/+$/, '') === '/health';
      if (this.apiKey !== null && !health && !bearerMatches(request.headers.authorization, this.apiKey)) {
        request.resume();
        throw new BlackboxHttpError(401, 'unauthorized', 'Missing or wrong bearer key');
      }
      const body = await this.readJson(request);
      const result = await this.route(request.method ?? 'GET', url, body, id);
      const payload = result.raw
        ? result.body
        : { request_id: id, ...(result.body as Record<string, unknown>) };
      send(response, result.status ?? 200, payload);
    } catch (error) {
      const http =
        error instanceof BlackboxHttpError
          ? error
          : new BlackboxHttpError(
              500,
              'internal_error',
              error instanceof Error ? error.message : String(error),
            );
      // A body cut off at the size limit leaves unread bytes on the connection: do not reuse it.
      if (http.status === 413 && !request.complete) response.setHeader('connection', 'close');
      send(response, http.status, {
        request_id: id,
        error: http.error,
        message: http.message,
        details: http.details,
      });
    } finally {
      this.httpInflight -= 1;
    }
  }

  private async readJson(request: IncomingMessage): Promise<unknown> {
    if (request.method === 'GET' || request.method === 'HEAD') return undefined;
    const limit = this.config.max_request_bytes;
    const tooLarge = () =>
      new BlackboxHttpError(413, 'request_too_large', `Request body exceeds the limit of ${limit} bytes`, {
        limit_bytes: limit,
      });
    if (Number(request.headers['content-length'] ?? 0) > limit) {
      request.resume();
      throw tooLarge();
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of request) {
      size += (chunk as Buffer).length;
      if (size > limit) {
        request.resume();
        throw tooLarge();
      }
      chunks.push(chunk as Buffer);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    if (text.trim() === '') return {};
    try {
      return JSON.parse(text);
    } catch (error) {
      throw new BlackboxHttpError(400, 'request_error', 'Request body is not valid JSON', {
        errors: [{ path: '(root)', message: error instanceof Error ? error.message : String(error) }],
      });
    }
  }

  private async route(
    method: string,
    url: URL,
    body: unknown,
    id: string,
  ): Promise<{ status?: number; body: unknown; raw?: boolean }> {
    const path = url.pathname.replace(/\/+$/, '') || '/';
    if (method === 'GET' && path === '/health') {
      return {
        raw: true,
        body: {
          healthy: this.status !== 'error' && this.status !== 'shutting_down',
          version: blackboxServerVersion,
        },
      };
    }
    if (method === 'GET' && path === '/v1/status') return { body: this.statusBody() };
    if (method === 'POST' && path === '/v1/rollout/register') return this.register(body);
    if (method === 'POST' && path === '/v1/rollout/pause') return this.pause(body);
    if (method === 'POST' && path === '/v1/rollout/resume') return this.resume(body);
    if (method === 'GET' && path === '/v1/rollout/pause_state') return { body: this.pauseStateBody() };
    const match = /^\/v1\/sessions\/([^/]+)(?:\/(.*))?$/.exec(path);
    if (match) {
      const sessionId = decodePathSegment(match[1] as string, 'session_id');
      const rest = match[2] ?? '';
      if (!idPattern.test(sessionId)) {
        throw new BlackboxHttpError(400, 'request_error', 'Invalid session id', {
          errors: [{ path: 'session_id', message: 'must match the id pattern' }],
        });
      }
      if (method === 'POST' && rest === 'messages') return this.messages(sessionId, body, id);
      if (method === 'POST' && rest === 'execute_cmd') return this.executeCommand(sessionId, body);
      if (method === 'POST' && rest === 'abort') return this.abort(sessionId);
      if (method === 'GET' && rest === '') return { body: this.sessionBody(sessionId, url.searchParams) };
      const turnMatch = /^turns\/([^/]+)(\/cancel)?$/.exec(rest);
      if (turnMatch) {
        const turnId = decodePathSegment(turnMatch[1] as string, 'turn_id');
        if (method === 'POST' && turnMatch[2]) return this.cancel(sessionId, turnId);
        if (method === 'GET' && !turnMatch[2])
          return this.turnStatus(sessionId, turnId, url.searchParams.get('wait'));
      }
    }
    throw new BlackboxHttpError(404, 'not_found', `No route ${method} ${url.pathname}`);
  }

  // ---------------------------------------------------------------- status

  private sessionCounts() {
    let active = 0;
    let desynced = 0;
    let aborted = 0;
    for (const session of this.sessions.values()) {
      if (session.state === 'active') active += 1;
      else if (session.state === 'desynced') desynced += 1;
      else aborted += 1;
    }
    return {
      active_count: active,
      desynced_count: desynced,
      aborted_count: aborted,
      total_count: this.sessions.size,
      max_sessions: this.effective.max_sessions,
    };
  }

  private capabilities(): AdapterCapabilities {
    return this.adapter?.capabilities ?? defaultCapabilities;
  }

  private configBody() {
    const { host: _host, port: _port, ...rest } = this.effective;
    return rest;
  }

  private statusBody() {
    return {
      status: this.status,
      binding: this.binding,
      sessions: this.sessionCounts(),
      capabilities: this.capabilities(),
      config: this.configBody(),
      implemented_backends: Object.keys(this.adapters).sort(),
      known_backends: [...new Set([...knownBackends, ...Object.keys(this.adapters)])].sort(),
      ...(this.lastError ? { last_error: this.lastError } : {}),
    };
  }

  // ---------------------------------------------------------------- register

  private async register(body: unknown): Promise<{ body: unknown }> {
    const request = parseBody(registerRequestSchema, body, 'register request');
    if (this.status === 'shutting_down')
      throw new BlackboxHttpError(503, 'shutting_down', 'Server is shutting down');
    if (this.status === 'initializing')
      throw new BlackboxHttpError(409, 'conflict', 'Server is initializing');
    const router = normalizeRouter(request.router, request.router_api_path);
    const fingerprint = fingerprintOf({
      blackbox_type: request.blackbox_type,
      router: `${router.base}${router.apiPath}`,
      bound_session_id: request.bound_session_id,
      bound_instance_id: request.bound_instance_id,
      bound_sandbox_id: request.bound_sandbox_id,
      system_prompt_file: request.system_prompt_file,
      backend_options: request.backend_options,
      server_config: request.server_config,
    });
    if (this.status === 'ready' && this.fingerprint === fingerprint && this.binding) {
      return { body: this.registerBody() };
    }
    const busy = [...this.sessions.values()].some((session) => session.state !== 'aborted');
    if (this.binding && busy && this.fingerprint !== fingerprint) {
      throw new BlackboxHttpError(409, 'conflict', 'Server is bound to another session with live state', {
        bound_session_id: this.binding.bound_session_id,
      });
    }
    const factory = this.adapters[request.blackbox_type];
    if (!factory) {
      const known = (knownBackends as readonly string[]).includes(request.blackbox_type);
      throw new BlackboxHttpError(
        400,
        'request_error',
        known
          ? `Backend ${request.blackbox_type} is not implemented by this server`
          : `Unknown blackbox_type ${request.blackbox_type}`,
        {
          errors: [{ path: 'blackbox_type', message: 'not available' }],
          implemented: Object.keys(this.adapters),
        },
      );
    }
    const { proxy: proxyRaw, ...adapterOptions } = request.backend_options;
    const proxyResult = proxyOptionsSchema.safeParse(proxyRaw ?? {});
    if (!proxyResult.success) throw validation(proxyResult.error, 'backend_options.proxy');
    const systemPromptFile = request.system_prompt_file
      ? await this.ownFile(request.system_prompt_file, 'system_prompt_file')
      : null;
    if (request.server_config?.runtime_root !== undefined) {
      await this.ownDirectory(request.server_config.runtime_root, 'server_config.runtime_root');
    }

    await this.teardownBackend();
    this.sessions.clear();
    this.status = 'initializing';
    this.effective = { ...this.config, ...(request.server_config ?? {}) } as BlackboxServerConfig;
    try {
      await this.initBackend(
        { ...request, system_prompt_file: systemPromptFile },
        router,
        proxyResult.data,
        adapterOptions,
        factory,
      );
    } catch (error) {
      await this.teardownBackend();
      this.binding = null;
      this.fingerprint = null;
      if (error instanceof AdapterOptionsError || error instanceof BlackboxHttpError) {
        this.status = 'idle';
        if (error instanceof BlackboxHttpError) throw error;
        throw new BlackboxHttpError(400, 'request_error', error.message, { errors: error.errors });
      }
      this.status = 'error';
      this.lastError = error instanceof Error ? error.message : String(error);
      throw new BlackboxHttpError(502, 'backend_error', `Backend initialization failed: ${this.lastError}`);
    }
    this.fingerprint = fingerprint;
    this.status = 'ready';
    this.lastError = null;
    this.startHealthMonitor();
    return { body: this.registerBody() };
  }

  /** The roots a register request may name files under: the work dir and the configured runtime root. */
  private async ownRoots(): Promise<string[]> {
    const roots = await Promise.all(
      [this.workDir, this.config.runtime_root].map((root) => realpath(root).catch(() => resolve(root))),
    );
    return [...new Set(roots)];
  }

  /**
   * Resolves a file a register request names (symlinks included) and refuses it unless it is an
   * absolute, readable file inside the sandbox's own tree: a caller must not make the server read
   * host files such as `/etc/shadow` into the agent's prompt.
   */
  private async ownFile(file: string, field: string): Promise<string> {
    const refuse = (why: string) =>
      new BlackboxHttpError(400, 'request_error', `${field} ${why}`, {
        errors: [{ path: field, message: why }],
      });
    if (!isAbsolute(file)) throw refuse('must be an absolute path');
    let resolved: string;
    try {
      resolved = await realpath(file);
      await access(resolved, constants.R_OK);
    } catch {
      throw refuse('must be a readable file');
    }
    const roots = await this.ownRoots();
    if (!roots.some((root) => isInside(root, resolved))) {
      throw refuse(`must resolve inside the server's work dir or runtime root (${roots.join(', ')})`);
    }
    return resolved;
  }

  /** Like {@link ownFile} for a directory the server will create things in (it need not exist yet). */
  private async ownDirectory(directory: string, field: string): Promise<void> {
    let existing = resolve(directory);
    let resolved: string | null = null;
    while (resolved === null) {
      try {
        resolved = join(await realpath(existing), relative(existing, resolve(directory)));
      } catch {
        const parent = resolve(existing, '..');
        if (parent === existing) break;
        existing = parent;
      }
    }
    const roots = await this.ownRoots();
    if (resolved === null || !roots.some((root) => isInside(root, resolved))) {
      throw new BlackboxHttpError(
        400,
        'request_error',
        `${field} must resolve inside the server's work dir or runtime root (${roots.join(', ')})`,
        { errors: [{ path: field, message: 'outside the server tree' }] },
      );
    }
  }

  private async initBackend(
    request: RegisterRequest,
    router: { base: string; apiPath: string },
    proxyOptions: z.output<typeof proxyOptionsSchema>,
    adapterOptions: Record<string, unknown>,
    factory: AdapterFactory,
  ): Promise<void> {
    const runtimeId = `rt-${randomBytes(6).toString('hex')}`;
    const runtimeDir = join(this.effective.runtime_root, runtimeId);
    await mkdir(runtimeDir, { recursive: true });
    let systemPrompt: string | null = null;
    let systemPromptBinding: Binding['system_prompt'] = null;
    if (request.system_prompt_file) {
      const runtimeFile = join(runtimeDir, 'system_prompt.txt');
      await copyFile(request.system_prompt_file, runtimeFile);
      systemPrompt = await readFile(runtimeFile, 'utf8');
      systemPromptBinding = {
        source_file: request.system_prompt_file,
        runtime_file: runtimeFile,
        applies_to: request.blackbox_type,
      };
    }
    const adapter = factory(adapterOptions);
    const proxyApiKey = randomBytes(24).toString('base64url');
    const proxy = new RolloutLlmProxy({
      apiKey: proxyApiKey,
      upstreamOrigin: await this.upstreamOrigin(router.base),
      apiPath: router.apiPath,
      sessionId: request.bound_session_id,
      instanceId: request.bound_instance_id,
      sandboxId: request.bound_sandbox_id ?? null,
      proxy: proxyOptions,
      timeoutMs: this.effective.router_timeout,
      onIncident: (incident) => this.onIncident(incident),
    });
    this.adapter = adapter;
    this.llmProxy = proxy;
    const origin = await proxy.start();
    if (this.paused) proxy.pause();
    await adapter.init({
      runtimeDir,
      workDir: this.workDir,
      proxyOrigin: origin,
      proxyApiKey,
      apiPath: router.apiPath,
      systemPrompt,
      routerTimeoutMs: this.effective.router_timeout,
      sessionId: request.bound_session_id,
      instanceId: request.bound_instance_id,
      drainModelRequests: () => proxy.drain().then(() => undefined),
    });
    this.binding = {
      runtime_id: runtimeId,
      blackbox_type: request.blackbox_type,
      router_raw: request.router,
      router_base_url: router.base,
      router_api_path: router.apiPath,
      bound_session_id: request.bound_session_id,
      bound_instance_id: request.bound_instance_id,
      bound_sandbox_id: request.bound_sandbox_id ?? null,
      system_prompt: systemPromptBinding,
      runtime_dir: runtimeDir,
      registered_at: now(),
      backend_options: request.backend_options,
    };
    const created = now();
    this.sessions.set(request.bound_session_id, {
      id: request.bound_session_id,
      instanceId: request.bound_instance_id,
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

  private registerBody() {
    return {
      status: this.status,
      binding: this.binding,
      capabilities: this.capabilities(),
      config: this.configBody(),
    };
  }

  private async teardownBackend(): Promise<void> {
    if (this.healthTimer) clearInterval(this.healthTimer);
    this.healthTimer = null;
    const adapter = this.adapter;
    const proxy = this.llmProxy;
    this.adapter = null;
    this.llmProxy = null;
    await adapter?.close().catch(() => undefined);
    await proxy?.close().catch(() => undefined);
  }

  private async healthy(): Promise<boolean> {
    const adapter = this.adapter;
    if (!adapter) return false;
    const retries = this.effective.runtime_health_check_retries;
    for (let attempt = 0; attempt <= retries; attempt++) {
      if (await adapter.health().catch(() => false)) return true;
      if (attempt < retries) await sleep(this.effective.runtime_health_check_retry_delay * 1000);
    }
    return false;
  }

  private startHealthMonitor(): void {
    if (this.healthTimer) clearInterval(this.healthTimer);
    this.healthTimer = setInterval(async () => {
      if (this.status !== 'ready' || this.paused) return;
      if (await this.healthy()) return;
      this.markBackendFailed('the agent backend stopped answering its health check');
    }, this.effective.runtime_health_check_interval * 1000);
    this.healthTimer.unref();
  }

  private markBackendFailed(reason: string): void {
    this.status = 'error';
    this.lastError = reason;
    for (const session of this.sessions.values()) if (session.state !== 'aborted') session.state = 'desynced';
  }

  // ---------------------------------------------------------------- sessions and turns

  private boundSession(sessionId: string): Session {
    if (!this.binding) throw new BlackboxHttpError(409, 'not_registered', 'No rollout is registered');
    if (sessionId !== this.binding.bound_session_id) {
      throw new BlackboxHttpError(
        409,
        'bound_session_mismatch',
        'Session id does not match the bound session',
        {
          expected: this.binding.bound_session_id,
          actual: sessionId,
        },
      );
    }
    const session = this.sessions.get(sessionId);
    if (!session) throw new BlackboxHttpError(404, 'not_found', `Unknown session ${sessionId}`);
    return session;
  }

  private async withLock<T>(session: Session, work: () => Promise<T>): Promise<T> {
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

  private async messages(
    sessionId: string,
    body: unknown,
    id: string,
  ): Promise<{ status?: number; body: unknown }> {
    const request = parseBody(messagesRequestSchema, body, 'messages request');
    const session = this.boundSession(sessionId);
    const [message] = request.messages;
    const content = message?.content;
    if (
      request.messages.length !== 1 ||
      message?.role !== 'user' ||
      typeof content !== 'string' ||
      content.trim() === ''
    ) {
      throw new BlackboxHttpError(
        400,
        'request_error',
        'Exactly one user message with non-empty text content is required',
        {
          errors: [{ path: 'messages', message: 'exactly one non-empty user message' }],
        },
      );
    }
    if (request.mode === 'async' && !request.turn_id) {
      throw new BlackboxHttpError(400, 'request_error', 'Async messages require a turn_id', {
        errors: [{ path: 'turn_id', message: 'required in async mode' }],
      });
    }
    const fingerprint = fingerprintOf(request.messages);
    const { turn, replay } = await this.withLock(session, async () => {
      while (this.paused) await new Promise<void>((resolve) => this.resumeWaiters.push(resolve));
      const turnId = this.resolveTurnId(session, request.turn_id ?? null);
      const existing = session.turns.get(turnId);
      if (existing) {
        if (existing.fingerprint !== fingerprint) {
          throw new BlackboxHttpError(409, 'conflict', `Turn ${turnId} was submitted with a different body`, {
            turn_id: turnId,
          });
        }
        return { turn: existing, replay: true };
      }
      if (session.state === 'aborted')
        throw new BlackboxHttpError(409, 'session_aborted', 'Session was aborted');
      if (session.state === 'desynced')
        throw new BlackboxHttpError(409, 'session_desynced', 'Session is desynced');
      if (session.turnCount >= this.effective.max_turns) {
        throw new BlackboxHttpError(
          429,
          'too_many_requests',
          `Session reached max_turns (${this.effective.max_turns})`,
        );
      }
      if (session.activeTurnId) {
        const active = session.turns.get(session.activeTurnId);
        if (active && !isTerminal(active.status)) {
          throw new BlackboxHttpError(409, 'conflict', 'Another turn is active', {
            active_turn_id: active.id,
          });
        }
      }
      if (!(await this.healthy())) {
        this.markBackendFailed('the agent backend failed its health check before a turn');
        throw new BlackboxHttpError(503, 'backend_unavailable', 'Agent backend is not healthy');
      }
      if (request.turn_id && session.turnMode === null) session.turnMode = 'explicit';
      const created = this.createTurn(turnId, fingerprint, request.messages, request.metadata ?? null);
      session.turns.set(turnId, created);
      session.order.push(turnId);
      session.activeTurnId = turnId;
      session.turnCount += 1;
      session.updatedAt = now();
      void this.runTurn(session, created, content);
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
    if (turn.status !== 'committed') {
      const error = turn.error as TurnError;
      throw new BlackboxHttpError(error.http_status, error.error, error.message, error.details);
    }
    void id;
    return {
      body: {
        session_id: session.id,
        instance_id: session.instanceId,
        turn_id: turn.id,
        state: session.state,
        idempotent_replay: replay,
        outputs: turn.outputs,
        backend: turn.backend,
        usage: turn.usage,
      },
    };
  }

  private resolveTurnId(session: Session, explicit: string | null): string {
    if (explicit === null) {
      if (session.turnMode === 'explicit') {
        throw new BlackboxHttpError(
          400,
          'request_error',
          'This session uses explicit turn ids: turn_id is required',
          {
            errors: [{ path: 'turn_id', message: 'required' }],
          },
        );
      }
      if (session.singleTurnId === null) {
        session.turnMode = 'single';
        session.singleTurnId = `turn-${randomBytes(8).toString('hex')}`;
      }
      return session.singleTurnId;
    }
    if (session.turnMode === 'single' && explicit !== session.singleTurnId) {
      throw new BlackboxHttpError(409, 'conflict', 'This session is in single-turn mode', {
        turn_id: session.singleTurnId,
      });
    }
    return explicit;
  }

  private createTurn(
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

  private stopTurn(turn: Turn, reason: TurnError): void {
    if (isTerminal(turn.status)) return;
    turn.stopReason ??= reason;
    turn.controller.abort();
  }

  private onIncident(incident: ProxyIncident): void {
    const turnId = this.llmProxy?.currentTurn?.turnId;
    const session = this.binding ? this.sessions.get(this.binding.bound_session_id) : undefined;
    const turn = turnId ? session?.turns.get(turnId) : undefined;
    if (!turn) return;
    // Invalidated rollouts are left to the agent: it receives an empty reply and ends by itself.
    if (incident.kind === 'max_steps') this.stopTurn(turn, incidentError(incident));
    else if (incident.kind === 'context_overflow') this.stopTurn(turn, incidentError(incident));
  }

  private activeMs(startTotalPaused: number, startedAt: number): number {
    const pausedNow = this.pausedTotalMs + (this.pausedSince === null ? 0 : Date.now() - this.pausedSince);
    return Date.now() - startedAt - (pausedNow - startTotalPaused);
  }

  private async runTurn(session: Session, turn: Turn, text: string): Promise<void> {
    const adapter = this.adapter as BlackboxAdapter;
    const proxy = this.llmProxy as RolloutLlmProxy;
    turn.status = 'inflight';
    turn.updatedAt = now();
    proxy.openTurn(turn.id);
    const budgetMs = this.effective.backend_timeout * 1000;
    const startedAt = Date.now();
    const pausedAtStart =
      this.pausedTotalMs + (this.pausedSince === null ? 0 : Date.now() - this.pausedSince);
    let timer: NodeJS.Timeout | undefined;
    // Paused time does not count against the backend timeout: re-arm until the active time is spent.
    const arm = () => {
      const left = budgetMs - this.activeMs(pausedAtStart, startedAt);
      if (left <= 0 && !this.paused) {
        this.stopTurn(turn, {
          error: 'backend_timeout',
          message: `Backend did not finish within ${this.effective.backend_timeout} s`,
          details: { backend_timeout: this.effective.backend_timeout },
          http_status: 504,
        });
        return;
      }
      timer = setTimeout(arm, Math.max(left, 50));
    };
    arm();
    let result: Awaited<ReturnType<BlackboxAdapter['runTurn']>> | null = null;
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
      const final = error as TurnError;
      turn.usage = usage;
      turn.error = final;
      if (final.error === 'cancelled') turn.status = 'cancelled';
      else {
        turn.status = 'unknown';
        if (final.error === 'aborted') session.state = 'aborted';
        else if (session.state !== 'aborted') session.state = 'desynced';
        await adapter.abort().catch(() => undefined);
        if (final.error !== 'server_shutdown') {
          void this.healthy().then((ok) => {
            if (!ok && this.status === 'ready')
              this.markBackendFailed('the agent backend is unhealthy after a failed turn');
          });
        }
      }
    }
    session.updatedAt = now();
    turn.finish();
  }

  private turnBody(session: Session, turn: Turn) {
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

  private async turnStatus(
    sessionId: string,
    turnId: string,
    wait: string | null,
  ): Promise<{ body: unknown }> {
    const session = this.boundSession(sessionId);
    const turn = session.turns.get(turnId);
    if (!turn) throw new BlackboxHttpError(404, 'not_found', `Unknown turn ${turnId}`, { turn_id: turnId });
    const seconds = Math.min(Math.max(Number(wait ?? 0) || 0, 0), 60);
    if (seconds > 0 && !isTerminal(turn.status)) await Promise.race([turn.done, sleep(seconds * 1000)]);
    return { body: this.turnBody(session, turn) };
  }

  private async cancel(sessionId: string, turnId: string): Promise<{ body: unknown }> {
    const session = this.boundSession(sessionId);
    const turn = session.turns.get(turnId);
    if (!turn) throw new BlackboxHttpError(404, 'not_found', `Unknown turn ${turnId}`, { turn_id: turnId });
    let status: string = turn.status;
    if (!isTerminal(turn.status)) {
      turn.cancelRequested = true;
      this.stopTurn(turn, {
        error: 'cancelled',
        message: 'Turn was cancelled',
        details: {},
        http_status: 499,
      });
      status = turn.status === 'queued' ? 'cancelled' : 'cancel_requested';
    }
    return {
      body: {
        session_id: session.id,
        instance_id: session.instanceId,
        turn_id: turn.id,
        status,
        state: session.state,
      },
    };
  }

  private async abort(sessionId: string): Promise<{ body: unknown }> {
    const session = this.boundSession(sessionId);
    const mode = session.state === 'aborted' ? 'noop' : 'best_effort';
    session.state = 'aborted';
    const active = session.activeTurnId ? session.turns.get(session.activeTurnId) : undefined;
    if (active && !isTerminal(active.status)) {
      this.stopTurn(active, {
        error: 'aborted',
        message: 'Session was aborted during the turn',
        details: {},
        http_status: 409,
      });
      await active.done;
    } else if (mode === 'best_effort') {
      await this.adapter?.abort().catch(() => undefined);
    }
    session.updatedAt = now();
    return {
      body: {
        session_id: session.id,
        instance_id: session.instanceId,
        action: 'abort',
        state: session.state,
        mode,
      },
    };
  }

  private sessionBody(sessionId: string, query: URLSearchParams) {
    const session = this.boundSession(sessionId);
    const flag = (name: string) => ['1', 'true', 'yes'].includes((query.get(name) ?? '').toLowerCase());
    const latest = session.order.at(-1);
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
      ...(flag('include_turns')
        ? { turns: session.order.map((id) => this.turnBody(session, session.turns.get(id) as Turn)) }
        : {}),
      ...(flag('include_trace')
        ? { trace: session.order.map((id) => ({ turn_id: id, status: session.turns.get(id)?.status })) }
        : {}),
    };
  }

  // ---------------------------------------------------------------- execute_cmd

  private async executeCommand(sessionId: string, body: unknown): Promise<{ body: unknown }> {
    const request = parseBody(executeCommandRequestSchema, body, 'execute_cmd request');
    if (/[\n\r\0]/.test(request.cmd)) {
      throw new BlackboxHttpError(400, 'request_error', 'cmd must be a single line', {
        errors: [{ path: 'cmd', message: 'newline, carriage return or NUL' }],
      });
    }
    if (!this.config.inside_sandbox) {
      throw new BlackboxHttpError(
        403,
        'forbidden',
        'execute_cmd runs commands only when the server runs inside a sandbox (BBS_INSIDE_SANDBOX=1): here they would run as the server user on the host',
      );
    }
    const session = this.boundSession(sessionId);
    const latest = session.order.length > 0 ? session.turns.get(session.order.at(-1) as string) : undefined;
    if (latest && !isTerminal(latest.status)) {
      throw new BlackboxHttpError(409, 'conflict', 'A turn is in progress', { active_turn_id: latest.id });
    }
    if (session.state === 'aborted')
      throw new BlackboxHttpError(409, 'session_aborted', 'Session was aborted');
    if (session.state === 'desynced') {
      const harvesting =
        latest?.error && ['context_overflow', 'max_steps_exceeded'].includes(latest.error.error);
      if (!harvesting) throw new BlackboxHttpError(409, 'session_desynced', 'Session is desynced');
    }
    const timeout = request.timeout ?? this.effective.execute_cmd_timeout;
    let result: Awaited<ReturnType<typeof runProcessGroup>>;
    try {
      result = await runProcessGroup(['/bin/sh', '-lc', request.cmd], {
        cwd: this.workDir,
        timeoutMs: timeout * 1000,
      });
    } catch (error) {
      throw new BlackboxHttpError(502, 'backend_error', `Failed to spawn the command: ${String(error)}`);
    }
    return {
      body: {
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
      },
    };
  }

  // ---------------------------------------------------------------- pause / resume

  private async pause(body: unknown): Promise<{ status?: number; body: unknown }> {
    const request = parseBody(pauseRequestSchema, body, 'pause request');
    if (!this.paused) {
      this.paused = true;
      this.pausedSince = Date.now();
    }
    this.pauseReason = request.reason;
    const proxy = this.llmProxy;
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
    const response = {
      status: 'paused',
      reason: request.reason,
      quiesced,
      version: this.version,
      http_inflight_requests: Math.max(this.httpInflight - 1, 0),
      active_sglang_generations: proxy?.inflightRequests ?? 0,
      suspended_generations: proxy?.inflightRequests ?? 0,
      details,
    };
    if (!quiesced)
      throw new BlackboxHttpError(503, 'pause_timeout', 'Generations did not quiesce in time', response);
    return { body: response };
  }

  private resumeAll(): void {
    const waiters = this.resumeWaiters;
    this.resumeWaiters = [];
    for (const wake of waiters) wake();
  }

  private async resume(body: unknown): Promise<{ body: unknown }> {
    const request = parseBody(resumeRequestSchema, body, 'resume request');
    if (request.version !== null && request.version !== undefined) this.version = String(request.version);
    const details: Record<string, unknown> = {};
    const proxy = this.llmProxy;
    if (proxy) {
      try {
        details.upstream = await proxy.resumeUpstream(request.reason, request.version ?? null);
      } catch (error) {
        details.upstream_error = error instanceof Error ? error.message : String(error);
      }
    }
    if (this.paused && this.pausedSince !== null) this.pausedTotalMs += Date.now() - this.pausedSince;
    this.paused = false;
    this.pausedSince = null;
    this.pauseReason = null;
    proxy?.resume(request.version ?? null);
    this.resumeAll();
    return { body: { status: 'resumed', reason: request.reason, version: this.version, details } };
  }

  private pauseStateBody() {
    const total = this.pausedTotalMs + (this.pausedSince === null ? 0 : Date.now() - this.pausedSince);
    return {
      paused: this.paused,
      pause_reason: this.pauseReason,
      version: this.version,
      adapter: {
        paused: this.llmProxy?.isPaused ?? this.paused,
        pause_reason: this.pauseReason,
        version: this.llmProxy?.version ?? this.version,
        http_inflight_requests: this.llmProxy?.inflightRequests ?? 0,
        total_paused_seconds: total / 1000,
      },
    };
  }
}

function incidentError(incident: ProxyIncident): TurnError {
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
      message: String(incident.body.message ?? 'Dressage proxy context window overflow.'),
      details: (incident.body.details as Record<string, unknown> | undefined) ?? {},
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

function isInside(root: string, path: string): boolean {
  const rest = relative(root, path);
  return rest === '' || (rest !== '..' && !rest.startsWith(`..${sep}`) && !isAbsolute(rest));
}

function isTerminal(status: TurnStatus): boolean {
  return status === 'committed' || status === 'failed' || status === 'cancelled' || status === 'unknown';
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

function send(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}
