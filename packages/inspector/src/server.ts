import { existsSync, readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DressageError } from '@dressage/protocol';
import {
  httpStatusOf,
  type RouteParameters,
  RouteTable,
  routeMissError,
  sendJson,
  serve,
} from '@dressage/protocol/http';
import { hostHeaderName, isLoopbackAddress } from '@dressage/protocol/internal';
import type { InspectedSession } from './model.js';
import { resolveView, sessionDetail, sessionExport, type TokenDecoder, tokenPage } from './session-detail.js';
import { maxPageSize, parseSessionQuery, SessionIndex } from './session-index.js';
import type { InspectorSource } from './sources/source.js';
import type { ErrorPage, InspectorInfo } from './views/api-types.js';

/**
 * The bundled front end. Both `src/server.ts` (tests, through the source condition) and the bundled
 * `dist/index.js` sit one folder below the package root, so one relative URL serves both.
 */
export const webRoot = fileURLToPath(new URL('../dist/web/', import.meta.url));

const contentTypes: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.map': 'application/json; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
};

function readWebAsset(name: string): string {
  const path = join(webRoot, name);
  if (!existsSync(path)) {
    throw new DressageError({
      code: 'failed_precondition',
      message: `The inspector front end is not built (${path} is missing): run pnpm --filter @dressage/inspector build`,
    });
  }
  return readFileSync(path, 'utf8');
}

// JSON inside <script>: "<" escaped so no string in the data can close the element.
function scriptSafeJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c');
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"]/g, (character) => `&#${character.charCodeAt(0)};`);
}

/**
 * A single HTML file with the bundled script, the styles and the session's data inlined, so it opens
 * from disk (or as a bug-report attachment) with no server.
 */
export function standaloneHtml(session: InspectedSession, decoder: TokenDecoder): string {
  const script = readWebAsset('assets/inspector.js').replace(/<\/script/gi, '<\\/script');
  const styles = readWebAsset('assets/inspector.css');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dressage inspect · ${escapeHtml(session.id)}</title>
<style>${styles}</style>
</head>
<body>
<div id="app"></div>
<script id="inspector-data" type="application/json">${scriptSafeJson(sessionExport(session, decoder))}</script>
<script type="module">${script}</script>
</body>
</html>
`;
}

const jsonHeaders = { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' };

function attachmentName(id: string, extension: string): string {
  return `session-${id.replace(/[^A-Za-z0-9._-]+/g, '_')}.${extension}`;
}

/** Options of {@link createInspectorHandler}. */
export interface InspectorHandlerOptions {
  source: InspectorSource;
  decoder: TokenDecoder;
  /**
   * Host names (of the `Host` header) accepted besides loopback ones (`localhost`, `127.0.0.1`,
   * `[::1]`); `'*'` accepts any. Requests naming another host are refused, so that a web page that
   * rebinds its own domain to 127.0.0.1 (DNS rebinding) cannot read the training data.
   */
  allowedHosts?: readonly string[];
}

/** Whether a `Host` header names loopback or one of `allowed`. */
export function hostAllowed(header: string | undefined, allowed: readonly string[] = []): boolean {
  if (allowed.includes('*')) return true;
  const name = hostHeaderName(header)?.toLowerCase();
  if (name === undefined) return false;
  return isLoopbackAddress(name) || allowed.some((host) => host.toLowerCase() === name);
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Malformed %-encoding in the path: ${segment}`,
      details: { segment },
    });
  }
}

/** The request handler of the inspector: the JSON API, the exports and the bundled front end. */
export function createInspectorHandler(options: InspectorHandlerOptions): {
  index: SessionIndex;
  handle: (request: IncomingMessage, response: ServerResponse) => void;
} {
  const { source, decoder } = options;
  const index = new SessionIndex(source.summaries);
  const loadSession = sessionLoader(source);
  const api = apiRoutes({ source, decoder, index, loadSession });

  const allowedHosts = options.allowedHosts ?? [];
  const queryOf = (request: IncomingMessage) => new URL(request.url ?? '/', 'http://inspector.local');
  // The JSON API by its route table; every other path is the front end's (a miss under /api is a
  // JSON 404 or 405).
  const served = serve(api, {
    invoke: (handler, request, response, parameters) =>
      handler(parameters, queryOf(request).searchParams, response),
    notFound: (request, response, miss) => {
      const url = queryOf(request);
      const segments = url.pathname.split('/').filter(Boolean);
      if (segments[0] === 'api') throw routeMissError(miss, request.method ?? 'GET', url.pathname);
      sendWebAsset(segments, request, response);
    },
    onError: (error, _request, response) => {
      const failure = DressageError.from(error, 'internal');
      sendJson(
        response,
        httpStatusOf(failure),
        { error: failure.code, message: failure.message },
        jsonHeaders,
      );
    },
  });

  return {
    index,
    handle: (request, response) => {
      if (!hostAllowed(request.headers.host, allowedHosts)) {
        sendJson(
          response,
          403,
          {
            error: 'forbidden_host',
            message: `Host ${JSON.stringify(request.headers.host ?? '')} is not allowed: the inspector answers loopback names only (allow others with allowedHosts / --allow-host)`,
          },
          jsonHeaders,
        );
        return;
      }
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        sendJson(response, 405, { error: 'method_not_allowed' }, jsonHeaders);
        return;
      }
      void served(request, response);
    },
  };
}

/** A running inspector. */
export interface InspectorServer {
  /** `http://127.0.0.1:PORT/`. */
  url: string;
  port: number;
  source: InspectorSource;
  index: SessionIndex;
  server: Server;
  /** Stops listening and closes open connections. */
  close(): Promise<void>;
}

/**
 * Starts the HTTP server on `host:port` (port 0 picks a free one). A specific listen address is an
 * allowed `Host` too; a wildcard one (`0.0.0.0`) needs `allowedHosts`.
 */
export async function listenInspector(
  options: InspectorHandlerOptions & { port?: number; host?: string },
): Promise<InspectorServer> {
  const host = options.host ?? '127.0.0.1';
  const wildcard = host === '0.0.0.0' || host === '::';
  const { index, handle } = createInspectorHandler({
    ...options,
    allowedHosts: [...(options.allowedHosts ?? []), ...(wildcard ? [] : [host])],
  });
  const server = createServer(handle);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${host}:${port}/`,
    port,
    source: options.source,
    index,
    server,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

// Parsed sessions by id, a few recently opened ones kept: paging through tokens re-reads the same one.
function sessionLoader(source: InspectorSource): (id: string) => InspectedSession {
  const cache = new Map<string, InspectedSession>();
  return (id: string): InspectedSession => {
    let session = cache.get(id);
    if (session === undefined) {
      session = source.load(id);
      if (session === undefined)
        throw new DressageError({ code: 'not_found', message: `No session ${id}`, details: { id } });
      // A few recently opened sessions stay parsed: paging through tokens re-reads the same one.
      if (cache.size >= 8) cache.delete(cache.keys().next().value!);
      cache.set(id, session);
    }
    return session;
  };
}

/** One API route: its path parameters, the query, and the response to answer on. */
type ApiRoute = (parameters: RouteParameters, query: URLSearchParams, response: ServerResponse) => void;

// The JSON API: the source's info, the session list and details, errors, the exports and token pages.
function apiRoutes(context: {
  source: InspectorSource;
  decoder: InspectorHandlerOptions['decoder'];
  index: SessionIndex;
  loadSession: (id: string) => InspectedSession;
}): RouteTable<ApiRoute> {
  const { source, decoder, index, loadSession } = context;
  const errorsOf = (sessionId: string) =>
    (source.errors ?? []).filter((error) => error.session_id === sessionId);
  const sessionView = (id: string, query: URLSearchParams) => {
    const session = loadSession(id);
    return { session, view: resolveView(session, query.get('view')) };
  };
  return new RouteTable<ApiRoute>({ decodeParameter: (raw) => decodeSegment(raw) })
    .add(['GET', 'HEAD'], '/api/info', (_, __, response) => {
      const info: InspectorInfo = {
        kind: source.kind,
        path: source.path,
        sessionCount: index.size,
        details: source.details,
      };
      sendJson(response, 200, info, jsonHeaders);
    })
    .add(['GET', 'HEAD'], '/api/sessions', (_, query, response) =>
      sendJson(response, 200, index.query(parseSessionQuery(query)), jsonHeaders),
    )
    .add(['GET', 'HEAD'], '/api/sessions/{id}', ({ id }, query, response) => {
      const { session, view } = sessionView(id!, query);
      const errors = errorsOf(session.sessionId ?? session.id);
      sendJson(response, 200, { ...sessionDetail(session, view), errors }, jsonHeaders);
    })
    .add(['GET', 'HEAD'], '/api/errors', (_, query, response) => {
      const session = query.get('session');
      const items = session === null ? [...(source.errors ?? [])] : errorsOf(session);
      const page: ErrorPage = { total: items.length, items };
      sendJson(response, 200, page, jsonHeaders);
    })
    .add(['GET', 'HEAD'], '/api/sessions/{id}/export.json', ({ id }, query, response) => {
      const { session } = sessionView(id!, query);
      sendJson(response, 200, sessionExport(session, decoder), {
        ...jsonHeaders,
        'content-disposition': `attachment; filename="${attachmentName(session.id, 'json')}"`,
      });
    })
    .add(['GET', 'HEAD'], '/api/sessions/{id}/export.html', ({ id }, query, response) => {
      const { session } = sessionView(id!, query);
      response.writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'content-disposition': `attachment; filename="${attachmentName(session.id, 'html')}"`,
      });
      response.end(standaloneHtml(session, decoder));
    })
    .add(
      ['GET', 'HEAD'],
      '/api/sessions/{id}/segments/{segment}/tokens',
      ({ id, segment }, query, response) => {
        const { session, view } = sessionView(id!, query);
        const offset = Number(query.get('offset') ?? 0) || 0;
        const limit = Math.min(Number(query.get('limit') ?? 2000) || 2000, 20 * maxPageSize);
        const page = tokenPage(session, view, Number(segment), decoder, offset, limit);
        if (page === undefined)
          sendJson(response, 404, { error: 'not_found', message: 'No such segment' }, jsonHeaders);
        else sendJson(response, 200, page, jsonHeaders);
      },
    );
}

// The bundled front end: a file of it by path, every other path the single-page app.
function sendWebAsset(segments: readonly string[], request: IncomingMessage, response: ServerResponse): void {
  // Static front end; every other path is the single-page app.
  const parts = segments.map(decodeSegment);
  const relative = parts.length === 0 ? 'index.html' : normalize(parts.join(sep));
  const target = join(webRoot, relative);
  const file =
    target.startsWith(webRoot) && existsSync(target) && extname(target) !== ''
      ? target
      : join(webRoot, 'index.html');
  const body = readWebAsset(file.slice(webRoot.length));
  response.writeHead(200, { 'content-type': contentTypes[extname(file)] ?? 'application/octet-stream' });
  response.end(request.method === 'HEAD' ? undefined : body);
}
