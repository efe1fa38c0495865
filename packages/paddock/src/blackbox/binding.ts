import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
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
  type AdapterContext,
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
import { killStrayProcesses, processGroupRssBytes } from './sandbox-processes.js';
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

/** The agent process kept between samples, and what it was started for. */
interface KeptAgent {
  /** What the agent was started with (type, router, options, system prompt, server settings). */
  key: string;
  runtimeDir: string;
  runtimeId: string;
  proxyApiKey: string;
  startedAt: number;
  /** Samples bound to it so far, the current one included. */
  samples: number;
  /** Recycled and waiting for the next sample. */
  parked: boolean;
}

/** What `POST /v1/rollout/recycle` answers. */
export interface RecycleResult {
  /** The agent keeps running for the next sample. */
  kept: boolean;
  /** Why it was not kept (null when it was, or when none was running). */
  reason: string | null;
  /** Stray processes of the ended sample that were killed. */
  killed_processes: number;
}

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
  #agent: KeptAgent | null = null;

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
    const factory = this.#factoryOf(request.blackbox_type);
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

    const systemPrompt = systemPromptFile ? await readFile(systemPromptFile, 'utf8') : null;
    const agentKey = fingerprintOf({
      blackbox_type: request.blackbox_type,
      router: `${router.base}${router.apiPath}`,
      system_prompt: systemPrompt,
      backend_options: request.backend_options,
      server_config: request.server_config,
    });
    const bound = { ...request, system_prompt_file: systemPromptFile };
    if ((await this.#reusable(agentKey)) && (await this.#reuseAgent(bound, systemPrompt))) {
      return this.#bound(fingerprint);
    }
    await this.#startAgent(bound, router, proxyResult.data, adapterOptions, factory, agentKey);
    return this.#bound(fingerprint);
  }

  // The adapter factory of a blackbox type, or the 400 saying whether it is unknown or unimplemented.
  #factoryOf(blackboxType: string): AdapterFactory {
    const factory = this.#adapters[blackboxType];
    if (factory) return factory;
    const known = (knownBackends as readonly string[]).includes(blackboxType);
    throw new BlackboxHttpError({
      status: 400,
      error: 'request_error',
      message: known
        ? `Backend ${blackboxType} is not implemented by this server`
        : `Unknown blackbox_type ${blackboxType}`,
      details: {
        errors: [{ path: 'blackbox_type', message: 'not available' }],
        implemented: Object.keys(this.#adapters),
      },
    });
  }

  // Rebinds the running agent to the new session; false when that failed (a fresh start follows).
  async #reuseAgent(request: RegisterRequest, systemPrompt: string | null): Promise<boolean> {
    this.stopHealthMonitor();
    this.#hooks.resetSessions();
    this.status = 'initializing';
    this.effective = { ...this.config, ...request.server_config };
    return this.#rebind(request, systemPrompt).then(
      () => true,
      () => false,
    );
  }

  // The server is bound: ready, its health watched, and the register answer.
  #bound(fingerprint: string): BlackboxRegisterResponse {
    this.#fingerprint = fingerprint;
    this.status = 'ready';
    this.#lastError = null;
    this.#startHealthMonitor();
    return this.#registerBody();
  }

  // Starts a new agent after tearing the old one down. Bad options are a 400 (the server goes back
  // to idle); any other failure leaves it in `error` and is a 502.
  async #startAgent(
    request: RegisterRequest,
    router: { base: string; apiPath: string },
    proxyOptions: z.output<typeof proxyOptionsSchema>,
    adapterOptions: unknown,
    factory: AdapterFactory,
    agentKey: string,
  ): Promise<void> {
    await this.teardown();
    this.#hooks.resetSessions();
    this.status = 'initializing';
    this.effective = { ...this.config, ...request.server_config };
    try {
      await this.#start(request, router, proxyOptions, adapterOptions, factory, agentKey);
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

  /**
   * `POST /v1/rollout/recycle`: the sample is over (its sandbox lease ended). The LLM proxy stops
   * taking requests, the agent is stopped, and, when it can be kept (`agent_reuse`, an adapter that
   * recycles, healthy, within `agent_max_samples`, `agent_max_age` and `agent_max_rss_mb`), its
   * session state is dropped while it keeps running; otherwise it is closed. Inside a sandbox,
   * every other process the sample left is killed and the runtime root emptied but for the kept
   * agent's directory. The server is then unbound, waiting for the next registration.
   */
  async recycle(): Promise<RecycleResult> {
    if (this.status === 'shutting_down')
      throw new BlackboxHttpError({
        status: 503,
        error: 'shutting_down',
        message: 'Server is shutting down',
      });
    if (this.status === 'initializing')
      throw new BlackboxHttpError({ status: 409, error: 'conflict', message: 'Server is initializing' });
    this.stopHealthMonitor();
    const adapter = this.adapter;
    const proxy = this.llmProxy;
    const agent = this.#agent;
    proxy?.unbind();
    await adapter?.abort().catch(() => undefined);
    await proxy?.drain(5000);
    this.#hooks.resetSessions();
    let reason: string | null = null;
    if (adapter !== null && agent !== null) {
      reason = await this.#keepRefusal(adapter, agent, this.status === 'ready');
      if (reason === null) {
        try {
          await (adapter.recycle as () => Promise<void>).call(adapter);
        } catch (error) {
          reason = `the agent could not drop the sample: ${error instanceof Error ? error.message : String(error)}`;
        }
      }
    }
    const kept = adapter !== null && agent !== null && reason === null;
    if (kept) agent.parked = true;
    else await this.teardown();
    let killed = 0;
    if (this.config.inside_sandbox) {
      killed = await killStrayProcesses(kept ? (adapter.processGroups?.() ?? []) : []);
      const keep = kept ? basename(agent.runtimeDir) : null;
      const root = this.config.runtime_root;
      const entries = await readdir(root).catch(() => [] as string[]);
      await Promise.all(
        entries
          .filter((entry) => entry !== keep)
          .map((entry) => rm(join(root, entry), { recursive: true, force: true }).catch(() => undefined)),
      );
    }
    this.#info = null;
    this.#fingerprint = null;
    this.status = 'idle';
    this.#lastError = null;
    return { kept, reason, killed_processes: killed };
  }

  /** Stops the health monitor, the agent and its LLM proxy. */
  async teardown(): Promise<void> {
    this.stopHealthMonitor();
    const adapter = this.adapter;
    const proxy = this.llmProxy;
    this.adapter = null;
    this.llmProxy = null;
    this.#agent = null;
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

  // Why the running agent cannot serve another sample, or null when it can.
  async #keepRefusal(adapter: BlackboxAdapter, agent: KeptAgent, ready: boolean): Promise<string | null> {
    const settings = this.effective;
    if (!settings.agent_reuse) return 'agent_reuse is off';
    if (adapter.recycle === undefined) return `the ${adapter.type} adapter starts its agent per sample`;
    if (!ready) return 'the agent failed';
    if (agent.samples >= settings.agent_max_samples)
      return `the agent served agent_max_samples (${settings.agent_max_samples}) samples`;
    const age = (Date.now() - agent.startedAt) / 1000;
    if (age >= settings.agent_max_age)
      return `the agent ran longer than agent_max_age (${settings.agent_max_age} s)`;
    const groups = adapter.processGroups?.() ?? [];
    const [sizes, healthy] = await Promise.all([
      Promise.all(groups.map((group) => processGroupRssBytes(group))),
      adapter.health().catch(() => false),
    ]);
    const rss = sizes.reduce((sum, bytes) => sum + bytes, 0);
    if (rss > settings.agent_max_rss_mb * 1024 ** 2)
      return `the agent holds ${Math.round(rss / 1024 ** 2)} MiB, over agent_max_rss_mb (${settings.agent_max_rss_mb})`;
    if (!healthy) return 'the agent is not healthy';
    return null;
  }

  // A parked agent started for the same key, still healthy and within its budgets.
  async #reusable(key: string): Promise<boolean> {
    const agent = this.#agent;
    const adapter = this.adapter;
    if (agent === null || adapter === null || this.llmProxy === null) return false;
    if (!agent.parked || agent.key !== key) return false;
    return (await this.#keepRefusal(adapter, agent, true)) === null;
  }

  #adapterContext(
    agent: Pick<KeptAgent, 'runtimeDir' | 'proxyApiKey'>,
    proxy: RolloutLlmProxy,
    request: RegisterRequest,
    apiPath: string,
    systemPrompt: string | null,
  ): AdapterContext {
    return {
      runtimeDir: agent.runtimeDir,
      workDir: this.#workDir,
      proxyOrigin: proxy.url,
      proxyApiKey: agent.proxyApiKey,
      apiPath,
      systemPrompt,
      routerTimeoutMs: this.effective.router_timeout,
      sessionId: request.bound_session_id,
      instanceId: request.bound_instance_id,
      insideSandbox: this.config.inside_sandbox,
      drainModelRequests: () => proxy.drain().then(() => undefined),
      pinAgentSession: (agentSessionId, header) => proxy.pinAgentSession(agentSessionId, header),
    };
  }

  #bindingInfo(
    request: RegisterRequest,
    router: { base: string; apiPath: string },
    runtimeId: string,
    runtimeDir: string,
    systemPrompt: BlackboxBinding['system_prompt'],
  ): BlackboxBinding {
    return {
      runtime_id: runtimeId,
      blackbox_type: request.blackbox_type,
      router_raw: request.router,
      router_base_url: router.base,
      router_api_path: router.apiPath,
      bound_session_id: request.bound_session_id,
      bound_instance_id: request.bound_instance_id,
      bound_sandbox_id: request.bound_sandbox_id ?? null,
      system_prompt: systemPrompt,
      runtime_dir: runtimeDir,
      registered_at: now(),
      backend_options: request.backend_options,
    };
  }

  // The parked agent takes the next sample: its LLM proxy now attributes requests to it.
  async #rebind(request: RegisterRequest, systemPrompt: string | null): Promise<void> {
    const agent = this.#agent as KeptAgent;
    const adapter = this.adapter as BlackboxAdapter;
    const proxy = this.llmProxy as RolloutLlmProxy;
    const router = normalizeRouter(request.router, request.router_api_path);
    let systemPromptBinding: BlackboxBinding['system_prompt'] = null;
    if (request.system_prompt_file) {
      const runtimeFile = join(agent.runtimeDir, 'system_prompt.txt');
      await copyFile(request.system_prompt_file, runtimeFile);
      systemPromptBinding = {
        source_file: request.system_prompt_file,
        runtime_file: runtimeFile,
        applies_to: request.blackbox_type,
      };
    }
    proxy.rebind({
      sessionId: request.bound_session_id,
      instanceId: request.bound_instance_id,
      sandboxId: request.bound_sandbox_id ?? null,
    });
    if (this.#hooks.paused()) proxy.pause();
    else if (proxy.isPaused) proxy.resume(null);
    await adapter.rebind?.(this.#adapterContext(agent, proxy, request, router.apiPath, systemPrompt));
    agent.samples += 1;
    agent.parked = false;
    this.#info = this.#bindingInfo(request, router, agent.runtimeId, agent.runtimeDir, systemPromptBinding);
    this.#hooks.openSession(request.bound_session_id, request.bound_instance_id);
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
    agentKey: string,
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
    await proxy.start();
    if (this.#hooks.paused()) proxy.pause();
    const startedAt = Date.now();
    await adapter.init(
      this.#adapterContext({ runtimeDir, proxyApiKey }, proxy, request, router.apiPath, systemPrompt),
    );
    this.#agent = {
      key: agentKey,
      runtimeDir,
      runtimeId,
      proxyApiKey,
      startedAt,
      samples: 1,
      parked: false,
    };
    this.#info = this.#bindingInfo(request, router, runtimeId, runtimeDir, systemPromptBinding);
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
