import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type {
  BlackboxBinding,
  BlackboxConfigBody,
  BlackboxRegisterResponse,
  BlackboxServerStatus,
  BlackboxSessionCounts,
  BlackboxStatusResponse,
} from '@dressage/protocol/blackbox';
import { sleep } from '@dressage/protocol/internal';
import { type SocketPipe, startSocketPipe } from '@dressage/sandbox/internal';
import type { z } from 'zod';
import {
  type AdapterCapabilities,
  type AdapterFactory,
  AdapterOptionsError,
  type BlackboxAdapter,
  defaultCapabilities,
  knownBackends,
} from './adapter.js';
import type { BlackboxServerConfig } from './config.js';
import { fingerprintOf } from './fingerprint.js';
import { BlackboxHttpError, parseBody, validationError } from './http-error.js';
import { type ProxyIncident, RolloutLlmProxy } from './llm-proxy.js';
import { ownDirectory, ownFile } from './own-paths.js';
import { proxyOptionsSchema, type RegisterRequest, registerRequestSchema } from './schemas.js';

/** What the binding tells the session table and asks of the pause control. */
export interface BindingHooks {
  /** True while a session of the current binding still has live (not aborted) state. */
  hasLiveSessions(): boolean;
  /** Forgets every session: a new rollout is being registered. */
  resetSessions(): void;
  /** Opens the session a registration binds the server to. */
  openSession(sessionId: string, instanceId: string): void;
  /** The agent backend failed: live sessions are desynced. */
  backendFailed(): void;
  /** The LLM proxy saw something that decides the current turn. */
  incident(incident: ProxyIncident): void;
  /** True while the server is paused: a new LLM proxy starts paused. */
  paused(): boolean;
}

/** Options of {@link RolloutBinding}. */
export interface RolloutBindingOptions {
  config: BlackboxServerConfig;
  adapters: Record<string, AdapterFactory>;
  workDir: string;
  upstreamSocket: string | null;
  hooks: BindingHooks;
}

/** Normalises a router address: adds `http://`, and lets a path in it override the API path. */
export function normalizeRouter(router: string, apiPath: string): { base: string; apiPath: string } {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(router) ? router : `http://${router}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new BlackboxHttpError({
      status: 400,
      error: 'request_error',
      message: `router is not a valid URL: ${router}`,
      details: {
        errors: [{ path: 'router', message: 'not a URL' }],
      },
    });
  }
  const path = url.pathname.replace(/\/+$/, '');
  const chosen = path !== '' ? path : apiPath === '' ? '' : `/${apiPath.replace(/^\/+|\/+$/g, '')}`;
  return { base: url.origin, apiPath: chosen === '/' ? '' : chosen };
}

const now = () => new Date().toISOString();

/**
 * The rollout the server is bound to and the agent behind it: registration (idempotent by
 * fingerprint), the adapter and LLM proxy it starts, the settings in force, and the health monitor
 * that marks the server failed when the agent stops answering.
 */
export class RolloutBinding {
  /** The server's own settings; a registration may override some of them. */
  readonly config: BlackboxServerConfig;
  /** The settings in force for the current binding. */
  effective: BlackboxServerConfig;
  /** Overall server state. */
  status: BlackboxServerStatus = 'idle';
  /** The agent adapter of the current binding. */
  adapter: BlackboxAdapter | null = null;
  /** The LLM proxy of the current binding. */
  llmProxy: RolloutLlmProxy | null = null;
  readonly #adapters: Record<string, AdapterFactory>;
  readonly #workDir: string;
  readonly #upstreamSocket: string | null;
  readonly #hooks: BindingHooks;
  #info: BlackboxBinding | null = null;
  #fingerprint: string | null = null;
  #upstreamPipe: Promise<SocketPipe> | null = null;
  #healthTimer: NodeJS.Timeout | null = null;
  #lastError: string | null = null;

  constructor(options: RolloutBindingOptions) {
    this.config = options.config;
    this.effective = options.config;
    this.#adapters = options.adapters;
    this.#workDir = options.workDir;
    this.#upstreamSocket = options.upstreamSocket;
    this.#hooks = options.hooks;
  }

  /** The current binding, or null before a registration. */
  get current(): BlackboxBinding | null {
    return this.#info;
  }

  /** The session id the server is bound to, or null. */
  get boundSessionId(): string | null {
    return this.#info?.bound_session_id ?? null;
  }

  /** `GET /v1/status`. */
  statusBody(sessions: Omit<BlackboxSessionCounts, 'max_sessions'>): BlackboxStatusResponse {
    return {
      status: this.status,
      binding: this.#info,
      sessions: { ...sessions, max_sessions: this.effective.max_sessions },
      capabilities: this.#capabilities(),
      config: this.#configBody(),
      implemented_backends: Object.keys(this.#adapters).sort(),
      known_backends: [...new Set([...knownBackends, ...Object.keys(this.#adapters)])].sort(),
      ...(this.#lastError ? { last_error: this.#lastError } : {}),
    };
  }

  /** `POST /v1/rollout/register`: binds the server to a rollout session and starts its agent. */
  async register(body: unknown): Promise<BlackboxRegisterResponse> {
    const request = parseBody(registerRequestSchema, body, 'register request');
    if (this.status === 'shutting_down')
      throw new BlackboxHttpError({
        status: 503,
        error: 'shutting_down',
        message: 'Server is shutting down',
      });
    if (this.status === 'initializing')
      throw new BlackboxHttpError({ status: 409, error: 'conflict', message: 'Server is initializing' });
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
    if (this.status === 'ready' && this.#fingerprint === fingerprint && this.#info) {
      return this.#registerBody();
    }
    if (this.#info && this.#hooks.hasLiveSessions() && this.#fingerprint !== fingerprint) {
      throw new BlackboxHttpError({
        status: 409,
        error: 'conflict',
        message: 'Server is bound to another session with live state',
        details: {
          bound_session_id: this.#info.bound_session_id,
        },
      });
    }
    const factory = this.#adapters[request.blackbox_type];
    if (!factory) {
      const known = (knownBackends as readonly string[]).includes(request.blackbox_type);
      throw new BlackboxHttpError({
        status: 400,
        error: 'request_error',
        message: known
          ? `Backend ${request.blackbox_type} is not implemented by this server`
          : `Unknown blackbox_type ${request.blackbox_type}`,
        details: {
          errors: [{ path: 'blackbox_type', message: 'not available' }],
          implemented: Object.keys(this.#adapters),
        },
      });
    }
    const { proxy: proxyRaw, ...adapterOptions } = request.backend_options;
    const proxyResult = proxyOptionsSchema.safeParse(proxyRaw ?? {});
    if (!proxyResult.success) throw validationError(proxyResult.error, 'backend_options.proxy');
    const roots = [this.#workDir, this.config.runtime_root];
    const systemPromptFile = request.system_prompt_file
      ? await ownFile(request.system_prompt_file, 'system_prompt_file', roots)
      : null;
    if (request.server_config?.runtime_root !== undefined) {
      await ownDirectory(request.server_config.runtime_root, 'server_config.runtime_root', roots);
    }

    await this.teardown();
    this.#hooks.resetSessions();
    this.status = 'initializing';
    this.effective = { ...this.config, ...request.server_config };
    try {
      await this.#start(
        { ...request, system_prompt_file: systemPromptFile },
        router,
        proxyResult.data,
        adapterOptions,
        factory,
      );
    } catch (error) {
      await this.teardown();
      this.#info = null;
      this.#fingerprint = null;
      if (error instanceof AdapterOptionsError || error instanceof BlackboxHttpError) {
        this.status = 'idle';
        if (error instanceof BlackboxHttpError) throw error;
        throw new BlackboxHttpError({
          status: 400,
          error: 'request_error',
          message: error.message,
          details: { errors: error.errors },
        });
      }
      this.status = 'error';
      this.#lastError = error instanceof Error ? error.message : String(error);
      throw new BlackboxHttpError({
        status: 502,
        error: 'backend_error',
        message: `Backend initialization failed: ${this.#lastError}`,
      });
    }
    this.#fingerprint = fingerprint;
    this.status = 'ready';
    this.#lastError = null;
    this.#startHealthMonitor();
    return this.#registerBody();
  }

  /** True when the agent answers its health check (with the configured retries). */
  async healthy(): Promise<boolean> {
    const adapter = this.adapter;
    if (!adapter) return false;
    const retries = this.effective.runtime_health_check_retries;
    for (let attempt = 0; attempt <= retries; attempt++) {
      if (await adapter.health().catch(() => false)) return true;
      if (attempt < retries)
        await sleep(this.effective.runtime_health_check_retry_delay * 1000, { unref: true });
    }
    return false;
  }

  /** Marks the server failed for `reason`; live sessions are desynced. */
  markBackendFailed(reason: string): void {
    this.status = 'error';
    this.#lastError = reason;
    this.#hooks.backendFailed();
  }

  /** Stops the health monitor, the agent and its LLM proxy. */
  async teardown(): Promise<void> {
    this.stopHealthMonitor();
    const adapter = this.adapter;
    const proxy = this.llmProxy;
    this.adapter = null;
    this.llmProxy = null;
    await adapter?.close().catch(() => undefined);
    await proxy?.close().catch(() => undefined);
  }

  /** Stops the health monitor (shutdown begins). */
  stopHealthMonitor(): void {
    if (this.#healthTimer) clearInterval(this.#healthTimer);
    this.#healthTimer = null;
  }

  /** Closes the pipe to the upstream socket, if one was opened. */
  async closeUpstream(): Promise<void> {
    const pipe = this.#upstreamPipe;
    this.#upstreamPipe = null;
    if (pipe) await (await pipe.catch(() => null))?.close();
  }

  #capabilities(): AdapterCapabilities {
    return this.adapter?.capabilities ?? defaultCapabilities;
  }

  #configBody(): BlackboxConfigBody {
    const { host: _host, port: _port, ...rest } = this.effective;
    return rest;
  }

  #registerBody(): BlackboxRegisterResponse {
    return {
      status: this.status,
      binding: this.#info,
      capabilities: this.#capabilities(),
      config: this.#configBody(),
    };
  }

  // With an upstream socket, model requests go to a loopback port of this network namespace that is
  // piped to the socket (fetch cannot dial a unix socket); the registered router keeps its path.
  async #upstreamOrigin(routerBase: string): Promise<string> {
    const socket = this.#upstreamSocket;
    if (socket === null) return routerBase;
    this.#upstreamPipe ??= startSocketPipe({
      listen: { host: '127.0.0.1', port: 0 },
      target: { path: socket },
    });
    const pipe = await this.#upstreamPipe.catch((error: unknown) => {
      this.#upstreamPipe = null;
      throw error;
    });
    return `http://127.0.0.1:${pipe.port}`;
  }

  async #start(
    request: RegisterRequest,
    router: { base: string; apiPath: string },
    proxyOptions: z.output<typeof proxyOptionsSchema>,
    adapterOptions: unknown,
    factory: AdapterFactory,
  ): Promise<void> {
    const runtimeId = `rt-${randomBytes(6).toString('hex')}`;
    const runtimeDir = join(this.effective.runtime_root, runtimeId);
    await mkdir(runtimeDir, { recursive: true });
    let systemPrompt: string | null = null;
    let systemPromptBinding: BlackboxBinding['system_prompt'] = null;
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
      upstreamOrigin: await this.#upstreamOrigin(router.base),
      apiPath: router.apiPath,
      sessionId: request.bound_session_id,
      instanceId: request.bound_instance_id,
      sandboxId: request.bound_sandbox_id ?? null,
      proxy: proxyOptions,
      timeoutMs: this.effective.router_timeout,
      onIncident: (incident) => this.#hooks.incident(incident),
    });
    this.adapter = adapter;
    this.llmProxy = proxy;
    const origin = await proxy.start();
    if (this.#hooks.paused()) proxy.pause();
    await adapter.init({
      runtimeDir,
      workDir: this.#workDir,
      proxyOrigin: origin,
      proxyApiKey,
      apiPath: router.apiPath,
      systemPrompt,
      routerTimeoutMs: this.effective.router_timeout,
      sessionId: request.bound_session_id,
      instanceId: request.bound_instance_id,
      insideSandbox: this.config.inside_sandbox,
      drainModelRequests: () => proxy.drain().then(() => undefined),
    });
    this.#info = {
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
    this.#hooks.openSession(request.bound_session_id, request.bound_instance_id);
  }

  #startHealthMonitor(): void {
    if (this.#healthTimer) clearInterval(this.#healthTimer);
    this.#healthTimer = setInterval(async () => {
      if (this.status !== 'ready' || this.#hooks.paused()) return;
      if (await this.healthy()) return;
      this.markBackendFailed('the agent backend stopped answering its health check');
    }, this.effective.runtime_health_check_interval * 1000);
    this.#healthTimer.unref();
  }
}
