import { chmod, chown, rm } from 'node:fs/promises';
import {
  Agent,
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from 'node:http';
import type { Socket } from 'node:net';

/**
 * The requests a sandboxed agent may send to the recording proxy: its model calls and the model
 * list. Everything else the proxy serves (finalize, discard, trajectory reads, rollout pause and
 * resume, stats) belongs to the trainer's side and is refused.
 */
export const allowedUpstreamRoutes: ReadonlyMap<string, 'GET' | 'POST'> = new Map([
  ['/v1/chat/completions', 'POST'],
  ['/v1/models', 'GET'],
]);

/** Options of {@link startUpstreamGate}. */
export interface UpstreamGateOptions {
  /** The unix socket the gate listens on (a stale file there is replaced). */
  listen: { path: string };
  /** The recording proxy every allowed request goes to. */
  target: { host: string; port: number };
  /** Owner of the socket (the slot's uid, so that the sandbox may connect). */
  owner?: { uid: number; gid: number };
  /**
   * The session the slot's requests are recorded under, asked at each request; `null` while the
   * slot is not leased (everything is refused then).
   */
  sessionOf: () => string | null;
  /** The recording proxy's key, added on the host side; the sandbox never sees it. */
  apiKey?: string;
}

/** A running {@link startUpstreamGate}. */
export interface UpstreamGate {
  /** Stops listening and cuts every open connection. */
  close(): Promise<void>;
}

// Headers that describe one hop, the caller's own credentials, or a session other than the slot's:
// never passed on as the sandbox sent them.
const droppedRequestHeaders = new Set([
  'host',
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'authorization',
  'x-api-key',
  'x-session-id',
  'x-smg-routing-key',
]);
const droppedResponseHeaders = new Set(['connection', 'keep-alive', 'transfer-encoding']);
const sessionHeaders = ['x-session-id', 'x-smg-routing-key'] as const;

// Refuses after the request body is read (and dropped): answering earlier cuts a keep-alive
// connection under a client still writing to it.
function refuse(
  incoming: IncomingMessage,
  response: ServerResponse,
  status: number,
  code: string,
  message: string,
): void {
  if (!incoming.complete) {
    incoming.resume();
    incoming.once('end', () => refuse(incoming, response, status, code, message));
    return;
  }
  const text = JSON.stringify({ error: { message, type: 'permission_error', code } });
  response.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}

function headerValue(headers: IncomingHttpHeaders, name: string): string | null {
  const value = headers[name];
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(', ') : value;
}

/**
 * The host end of a blackbox slot's one way out: an HTTP server on a unix socket in the slot's
 * directory that passes only the model routes of {@link allowedUpstreamRoutes} (also under the
 * slot's own session base URL, `/s/{session}/v1/...`) to the recording proxy, pinned to the slot's
 * session (`x-session-id` set to it; a request naming another session in a header or its base URL
 * is refused with 403), with the proxy's key added here. Request and response bodies are streamed
 * through as they arrive, never buffered whole.
 */
export async function startUpstreamGate(options: UpstreamGateOptions): Promise<UpstreamGate> {
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  const open = new Set<Socket>();
  const server = createServer((incoming, response) => {
    const admitted = admit(incoming, options.sessionOf());
    if ('refusal' in admitted) {
      const { status, code, message } = admitted.refusal;
      refuse(incoming, response, status, code, message);
      return;
    }
    forward(options, agent, { incoming, response, path: admitted.path, session: admitted.session });
  });

  server.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  });
  // Model calls run for minutes; the recording proxy bounds them itself.
  server.requestTimeout = 0;
  await rm(options.listen.path, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.listen.path, () => {
      server.off('error', reject);
      resolve();
    });
  });
  // Connecting to a unix socket needs write permission on it: only its owner gets that.
  if (options.owner) await chown(options.listen.path, options.owner.uid, options.owner.gid);
  await chmod(options.listen.path, 0o600);
  return {
    close: async () => {
      for (const socket of open) socket.destroy();
      open.clear();
      agent.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Why the gate refuses a request: its status, error code and message. */
interface Refusal {
  status: number;
  code: string;
  message: string;
}

// Admits a request: a model route of the allowed set, under the slot's own session (its base URL and
// session headers name no other), while the slot is leased. Answers the path to forward, or why not.
function admit(
  incoming: IncomingMessage,
  session: string | null,
): { path: string; session: string } | { refusal: Refusal } {
  const full = (incoming.url ?? '/').split('?')[0]?.replace(/\/+$/, '') || '/';
  // A session base URL (`/s/{session}/v1/...`) is the slot's own session or nothing.
  const based = /^\/s\/([^/]*)(\/.*)?$/.exec(full);
  if (based !== null) {
    let named: string | null = null;
    try {
      named = decodeURIComponent(based[1] as string);
    } catch {
      // Not valid percent-encoding: never the slot's session.
    }
    if (session === null || named !== session) {
      return {
        refusal: {
          status: 403,
          code: 'session_not_allowed',
          message: `the base URL names session ${JSON.stringify(named ?? based[1])}, but this sandbox may only record under its own session ${JSON.stringify(session)}`,
        },
      };
    }
  }
  const path = based === null ? full : (based[2] ?? '/');
  const method = allowedUpstreamRoutes.get(path);
  if (method === undefined || method !== incoming.method) {
    return {
      refusal: {
        status: 403,
        code: 'route_not_allowed',
        message: `${incoming.method} ${path} is not open to a sandbox: only ${[...allowedUpstreamRoutes]
          .map(([route, allowed]) => `${allowed} ${route}`)
          .join(' and ')} reach the recording proxy`,
      },
    };
  }
  if (session === null) {
    return {
      refusal: {
        status: 403,
        code: 'slot_not_leased',
        message: 'this sandbox slot is not leased: it has no session',
      },
    };
  }
  for (const name of sessionHeaders) {
    const named = headerValue(incoming.headers, name);
    if (named !== null && named !== session) {
      return {
        refusal: {
          status: 403,
          code: 'session_not_allowed',
          message: `${name} names session ${JSON.stringify(named)}, but this sandbox may only record under its own session ${JSON.stringify(session)}`,
        },
      };
    }
  }
  return { path, session };
}

// Passes an admitted request to the recording proxy with the slot's session and the proxy's key,
// and streams the answer back as it arrives; a caller that hangs up stops its call there too.
function forward(
  options: UpstreamGateOptions,
  agent: Agent,
  call: { incoming: IncomingMessage; response: ServerResponse; path: string; session: string },
): void {
  const { incoming, response, path, session } = call;
  const headers: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(incoming.headers)) {
    if (value !== undefined && !droppedRequestHeaders.has(name)) headers[name] = value;
  }
  headers.host = `${options.target.host}:${options.target.port}`;
  // The proxy takes the header's session before a body's `session_id`: this one decides.
  headers['x-session-id'] = session;
  if (options.apiKey !== undefined) headers.authorization = `Bearer ${options.apiKey}`;
  const outgoing = httpRequest(
    {
      host: options.target.host,
      port: options.target.port,
      method: incoming.method,
      path,
      headers,
      agent,
    },
    (upstream) => {
      const back: OutgoingHttpHeaders = {};
      for (const [name, value] of Object.entries(upstream.headers)) {
        if (value !== undefined && !droppedResponseHeaders.has(name)) back[name] = value;
      }
      response.writeHead(upstream.statusCode ?? 502, back);
      // Streams (SSE) go out chunk by chunk as the proxy writes them.
      response.flushHeaders();
      upstream.pipe(response);
      upstream.on('error', () => response.destroy());
    },
  );
  outgoing.on('error', (error) => {
    if (response.headersSent) response.destroy();
    else
      refuse(
        incoming,
        response,
        502,
        'upstream_unreachable',
        `the recording proxy is unreachable: ${error.message}`,
      );
  });
  // The caller hung up: stop its call at the proxy too.
  response.on('close', () => {
    if (!response.writableFinished) outgoing.destroy();
  });
  incoming.pipe(outgoing);
}
