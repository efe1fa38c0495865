import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { trajectoryReadToJson } from '@dressage/protocol';
import {
  RouteTable,
  readBody,
  SseWriter,
  sendJson,
  sendJsonText,
  serve,
  sseDoneFrame,
} from '@dressage/protocol/http';
import { bearerMatches, reachableHost } from '@dressage/protocol/internal';
import type { ProxyConfig } from './config.js';
import { detailError, ProxyHttpError, toHttpResponse } from './http-error.js';
import { identifierProblem } from './identifiers.js';
import { loadPromptTokenizer, type PromptTokenizer } from './prompt-tokenizer.js';
import { type CompletionOutcome, ProxyService } from './proxy-service.js';
import { parseJson } from './request-bytes.js';
import { completionToFrames, errorFrame, HEARTBEAT_FRAME } from './streaming.js';
import type { ToolCallHook } from './tool-call-hooks.js';

type Handler = (request: IncomingMessage, body: unknown) => Promise<unknown>;
type BytesHandler = (request: IncomingMessage, bytes: Buffer, response: ServerResponse) => Promise<void>;

/** A JSON route answers with what its handler returns; a bytes route reads its body raw and answers itself. */
type Route = { auth: boolean; handler: Handler } | { auth: boolean; bytesHandler: BytesHandler };

/** A running proxy. */
export interface ProxyServer {
  /** `http://host:port` to reach the listening socket from this machine. */
  readonly url: string;
  readonly port: number;
  /** `address:port` the socket is bound to, e.g. `0.0.0.0:8800` when it listens on every interface. */
  readonly boundAddress: string;
  readonly service: ProxyService;
  readonly server: Server;
  /** Stops accepting connections, waits for running calls and closes the store. */
  close(): Promise<void>;
}

/** Options of {@link startProxyServer}. */
export interface StartProxyOptions {
  /** Use this tokenizer instead of loading `config.tokenizerPath` (tests, embedding). */
  tokenizer?: PromptTokenizer;
  /** Tool-call hooks registered in code; they run after those named by `config.toolCallHooks`. */
  toolCallHooks?: readonly ToolCallHook[];
}

const connectionAborts = new WeakMap<Socket, AbortController>();

/**
 * The abort controller of a client connection, fired when the connection closes: the calls running
 * on it stop (their engine requests included). One per connection rather than per call because an
 * AbortController costs microseconds to make and the calls of a keep-alive connection share its
 * fate; a closed connection takes no more calls.
 */
function connectionAbort(socket: Socket): AbortController {
  let controller = connectionAborts.get(socket);
  if (controller === undefined) {
    const created = new AbortController();
    connectionAborts.set(socket, created);
    socket.once('close', () => created.abort());
    controller = created;
  }
  return controller;
}

/**
 * Decodes the session of a session base URL (`/s/{session}/v1/...`). Agents that set their own
 * `X-Session-Id` on every request (opencode does) can only be pinned by their base URL, so the URL's
 * session wins over every header and body field.
 *
 * @throws ProxyHttpError 400 when the session segment is not a valid id.
 */
function decodeSessionSegment(segment: string): string {
  let session: string;
  try {
    session = decodeURIComponent(segment);
  } catch {
    throw detailError(400, 'path session (/s/{session}/...) is not valid percent-encoding');
  }
  const problem = identifierProblem(session);
  if (problem !== null) throw detailError(400, `path session (/s/{session}/...) ${problem}`);
  return session;
}

/** A body already written as JSON text (typed arrays written straight into it). */
class JsonText {
  constructor(readonly text: string) {}
}

function sendBody(response: ServerResponse, status: number, body: unknown): void {
  if (body instanceof JsonText) sendJsonText(response, status, body.text);
  else sendJson(response, status, body);
}

function sendError(response: ServerResponse, error: unknown): void {
  if (error instanceof Error && error.name === 'AbortError') {
    response.destroy();
    return;
  }
  const { status, body } = toHttpResponse(error);
  sendJson(response, status, body);
}

function sendOutcome(response: ServerResponse, outcome: CompletionOutcome): void {
  if (!outcome.stream) {
    sendJson(response, 200, outcome.completion);
    return;
  }
  new SseWriter(response).end(completionToFrames(outcome.completion, outcome.includeUsage).join(''));
}

/**
 * Serves a {@link ProxyService} over HTTP (§1.1): bearer auth on everything but `/health`,
 * FastAPI-shaped errors, bounded request bodies, pseudo-streams with heartbeats.
 */
export function createProxyHttpServer(service: ProxyService): Server {
  const config = service.config;
  const heartbeatMs = config.streamHeartbeatIntervalSeconds * 1000;

  // The chat route takes its body as bytes: the service parses only what the agent appended.
  const chat: BytesHandler = async (request, bytes, response) => {
    const abort = connectionAbort(request.socket);
    const parsed = service.parseChatRequest(bytes, request.headers);
    const task = service.runChatCompletion(parsed, request.headers, abort.signal);
    const wantsStream = parsed.body.stream === true;
    if (!wantsStream || heartbeatMs <= 0) {
      sendOutcome(response, await task);
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const first = await Promise.race([
      task.then(
        (outcome) => ({ done: true as const, outcome }),
        (error: unknown) => ({ done: true as const, error }),
      ),
      new Promise<{ done: false }>((resolve) => {
        timer = setTimeout(() => resolve({ done: false }), heartbeatMs);
      }),
    ]);
    clearTimeout(timer);
    if (first.done) {
      if ('error' in first) throw first.error;
      sendOutcome(response, first.outcome);
      return;
    }
    // Slow generation: answer 200 now and keep the connection alive with comment frames.
    const stream = new SseWriter(response);
    stream.write(HEARTBEAT_FRAME);
    const beat = setInterval(() => stream.write(HEARTBEAT_FRAME), heartbeatMs);
    try {
      const outcome = await task;
      stream.end(completionToFrames(outcome.completion, outcome.includeUsage).join(''));
    } catch (error) {
      if (abort.signal.aborted) return;
      const { status, body: errorBody } = toHttpResponse(error);
      stream.end(`${errorFrame(status, errorBody)}${sseDoneFrame}`);
    } finally {
      clearInterval(beat);
    }
  };

  const routes = new RouteTable<Route>({ decodeParameter: decodeSessionSegment })
    .add('GET', '/v1/models', { auth: true, handler: () => service.models() })
    .add('POST', '/v1/chat/completions', { auth: true, bytesHandler: chat })
    .add('POST', '/session/finalize', { auth: true, handler: (_, body) => service.finalize(body) })
    .add('POST', '/session/discard', { auth: true, handler: (_, body) => service.discard(body) })
    .add('POST', '/trajectory/read', {
      auth: true,
      handler: async (_, body) => new JsonText(trajectoryReadToJson(await service.read(body))),
    })
    .add('GET', '/trajectory/stats', { auth: true, handler: async () => service.stats() })
    .add('POST', '/v1/rollout/pause', { auth: true, handler: (_, body) => service.pause(body) })
    .add('POST', '/v1/rollout/resume', { auth: true, handler: (_, body) => service.resume(body) })
    .add('GET', '/v1/rollout/pause_state', { auth: true, handler: async () => service.controller.state() })
    .add('GET', '/integration/capabilities', { auth: true, handler: () => service.capabilities() })
    .add('GET', '/health', { auth: false, handler: async () => service.health() })
    // The routes an agent uses also answer under a session base URL.
    .add('GET', '/s/{session}/v1/models', { auth: true, handler: () => service.models() })
    .add('POST', '/s/{session}/v1/chat/completions', { auth: true, bytesHandler: chat });

  const bodyTimeoutMs =
    config.requestBodyTimeoutSeconds === null ? null : config.requestBodyTimeoutSeconds * 1000;
  const tooLarge = (limit: number, declared: number | null) =>
    detailError(
      413,
      declared === null
        ? `Request body exceeds the limit of ${limit} bytes (--max-request-mb)`
        : `Request body of ${declared} bytes exceeds the limit of ${limit} bytes (--max-request-mb)`,
    );
  const timedOut = (timeoutMs: number) =>
    detailError(408, `Request body not received within ${timeoutMs / 1000} s (--request-body-timeout)`);
  const readRequestBody = (request: IncomingMessage, response: ServerResponse) =>
    readBody(request, {
      limit: config.maxRequestBytes,
      timeoutMs: bodyTimeoutMs,
      response,
      tooLarge,
      timedOut,
    });

  const server = createServer(
    serve(routes, {
      invoke: async (route, request, response, parameters) => {
        // The service reads the session from this header; the URL's replaces the agent's own.
        const session = parameters.session;
        if (session !== undefined) request.headers['x-session-id'] = session;
        if (route.auth && config.apiKey !== 'no-auth') {
          if (!bearerMatches(request.headers.authorization, config.apiKey))
            throw new ProxyHttpError({ status: 401, body: { detail: 'Unauthorized' } });
        }
        if ('bytesHandler' in route) {
          await route.bytesHandler(request, await readRequestBody(request, response), response);
          return;
        }
        const body =
          request.method === 'POST' ? parseJson(await readRequestBody(request, response)) : undefined;
        sendBody(response, 200, await route.handler(request, body));
      },
      notFound: (_request, _response, miss) => {
        throw miss.kind === 'not_found'
          ? detailError(404, 'Not Found')
          : detailError(405, 'Method Not Allowed');
      },
      onError: (error, _request, response) => sendError(response, error),
    }),
  );
  server.keepAliveTimeout = 75_000;
  server.headersTimeout = 80_000;
  server.requestTimeout = 0;
  return server;
}

/**
 * Loads the tokenizer, opens the store and listens on `config.host:config.port` (port 0 picks a
 * free one).
 *
 * @example
 * ```ts
 * const proxy = await startProxyServer(createProxyConfig({ tokenizerPath: '/models/qwen', port: 8800 }));
 * // point an OpenAI client at `${proxy.url}/v1`
 * await proxy.close();
 * ```
 */
export async function startProxyServer(
  config: ProxyConfig,
  options: StartProxyOptions = {},
): Promise<ProxyServer> {
  const tokenizer = options.tokenizer ?? (await loadPromptTokenizer(config));
  const service = await ProxyService.create(config, tokenizer, { toolCallHooks: options.toolCallHooks });
  const server = createProxyHttpServer(service);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // Node's default backlog (511) is below a rollout's burst of agent connections.
    server.listen({ port: config.port, host: config.host, backlog: 4096 }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = server.address() as AddressInfo;
  const port = bound.port;
  return {
    url: `http://${reachableHost(config.host)}:${port}`,
    port,
    boundAddress: `${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${port}`,
    service,
    server,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      await service.close();
      server.closeAllConnections();
      await closed;
    },
  };
}
