import { randomBytes } from 'node:crypto';
import { chmod, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseJsonBody, readBody, sendJson } from '@dressage/protocol/http';
import { bearerMatches, reachableHost, sleep } from '@dressage/protocol/internal';
import type { AdapterFactory } from './adapter.js';
import { RolloutBinding } from './binding.js';
import { type BlackboxServerConfig, defaultBlackboxConfig } from './config.js';
import { BlackboxHttpError } from './http-error.js';
import { PauseControl } from './pause.js';
import { type BlackboxParts, blackboxListener, type RouteResult, routePath } from './routes.js';
import { TurnEngine } from './turns.js';

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

const requestId = () => `req-${randomBytes(4).toString('hex')}`;

/**
 * The BlackboxServer: an HTTP server bound to one rollout session that drives a third-party agent
 * through an adapter, with every model call going through an in-process LLM proxy. Wire-compatible
 * with the reference (routes, payloads, statuses and the turn error table).
 *
 * It composes the parts that do the work: {@link RolloutBinding} (registration, the agent and its
 * health), {@link TurnEngine} (sessions and the turn state machine), {@link PauseControl} (pause and
 * resume around weight updates) and the route table; this class owns the socket and the HTTP
 * envelope (bearer key, body limit, request ids, errors).
 *
 * @example
 * ```ts
 * const server = new BlackboxServer({ adapters: builtinAdapters, config: { port: 23456 } });
 * await server.listen();
 * ```
 */
export class BlackboxServer {
  readonly config: BlackboxServerConfig;
  readonly #parts: BlackboxParts;
  readonly #listener: (request: IncomingMessage, response: ServerResponse) => Promise<void>;
  readonly #apiKey: string | null;
  readonly #socketPath: string | null;
  #http: Server | null = null;
  #httpInflight = 0;

  constructor(options: BlackboxServerOptions = {}) {
    this.config = { ...defaultBlackboxConfig, ...options.config };
    this.#apiKey = options.apiKey ?? null;
    this.#socketPath = options.socketPath ?? null;
    const workDir = options.workDir ?? process.cwd();
    // The parts refer to each other through these late-bound hooks, built once here.
    let turns: TurnEngine | null = null;
    const engine = () => {
      if (turns === null)
        throw new BlackboxHttpError({
          status: 500,
          error: 'internal_error',
          message: 'Turn engine not ready',
        });
      return turns;
    };
    const pause = new PauseControl({
      proxy: () => binding.llmProxy,
      httpInflight: () => this.#httpInflight,
    });
    const binding: RolloutBinding = new RolloutBinding({
      config: this.config,
      adapters: options.adapters ?? {},
      workDir,
      upstreamSocket: options.upstreamSocket ?? null,
      hooks: {
        hasLiveSessions: () => engine().hasLiveSessions(),
        resetSessions: () => engine().reset(),
        openSession: (sessionId, instanceId) => engine().open(sessionId, instanceId),
        backendFailed: () => engine().desyncAll(),
        incident: (incident) => engine().onIncident(incident),
        paused: () => pause.paused,
      },
    });
    turns = new TurnEngine(binding, pause);
    this.#parts = { binding, turns, pause, workDir };
    this.#listener = blackboxListener(this.#parts, {
      readJson: (request, response) => this.#readJson(request, response),
      answer: (response, result: RouteResult) =>
        sendJson(
          response,
          result.status ?? 200,
          result.bare ? result.body : { request_id: response.getHeader('x-request-id'), ...result.body },
        ),
      fail: (response, error) => this.#fail(response, error),
    });
  }

  /** Starts listening; returns the base URL to reach it from this machine. */
  async listen(): Promise<string> {
    const server = createServer((request, response) => void this.#dispatch(request, response));
    const socketPath = this.#socketPath;
    if (socketPath !== null) await rm(socketPath, { force: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      if (socketPath !== null) server.listen(socketPath, () => resolve());
      else server.listen(this.config.port, this.config.host, () => resolve());
    });
    this.#http = server;
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
    const address = this.#http?.address();
    if (typeof address === 'string') return `unix:${address}`;
    if (address === null || address === undefined) return null;
    return `${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
  }

  /** Fails active turns with `server_shutdown`, stops the agent and the proxy, closes the socket. */
  async close(): Promise<void> {
    const { binding, turns, pause } = this.#parts;
    binding.status = 'shutting_down';
    binding.stopHealthMonitor();
    const pending = turns.shutdown();
    pause.releaseWaiters();
    await Promise.race([Promise.all(pending), sleep(this.config.shutdown_timeout * 1000, { unref: true })]);
    await binding.teardown();
    const http = this.#http;
    this.#http = null;
    if (http) {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    }
    await binding.closeUpstream();
  }

  // Every request gets an id; every route but `/health` needs the key, asked before anything else
  // (a caller without it learns nothing of routes or bodies); then the route table answers.
  async #dispatch(request: IncomingMessage, response: ServerResponse): Promise<void> {
    response.setHeader('x-request-id', requestId());
    this.#httpInflight += 1;
    try {
      const health =
        request.method === 'GET' && routePath(new URL(request.url ?? '/', 'http://blackbox')) === '/health';
      if (this.#apiKey !== null && !health && !bearerMatches(request.headers.authorization, this.#apiKey)) {
        request.resume();
        this.#fail(
          response,
          new BlackboxHttpError({
            status: 401,
            error: 'unauthorized',
            message: 'Missing or wrong bearer key',
          }),
        );
        return;
      }
      await this.#listener(request, response);
    } finally {
      this.#httpInflight -= 1;
    }
  }

  // The BlackboxServer envelope `{request_id, error, message, details}`; anything but a
  // BlackboxHttpError is a 500 `internal_error`.
  #fail(response: ServerResponse, error: unknown): void {
    const http =
      error instanceof BlackboxHttpError
        ? error
        : new BlackboxHttpError({
            status: 500,
            error: 'internal_error',
            message: error instanceof Error ? error.message : String(error),
          });
    sendJson(response, http.status, {
      request_id: response.getHeader('x-request-id'),
      error: http.error,
      message: http.message,
      details: http.details,
    });
  }

  // A body cut off at the size limit leaves unread bytes on the connection: readBody has the
  // response close it.
  async #readJson(request: IncomingMessage, response: ServerResponse): Promise<unknown> {
    if (request.method === 'GET' || request.method === 'HEAD') return undefined;
    const bytes = await readBody(request, {
      limit: this.config.max_request_bytes,
      response,
      tooLarge: (limit) =>
        new BlackboxHttpError({
          status: 413,
          error: 'request_too_large',
          message: `Request body exceeds the limit of ${limit} bytes`,
          details: {
            limit_bytes: limit,
          },
        }),
    });
    return parseJsonBody(bytes, {
      invalid: (error) =>
        new BlackboxHttpError({
          status: 400,
          error: 'request_error',
          message: 'Request body is not valid JSON',
          details: {
            errors: [{ path: '(root)', message: error.message }],
          },
        }),
    });
  }
}
