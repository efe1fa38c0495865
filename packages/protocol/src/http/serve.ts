import type { IncomingMessage, ServerResponse } from 'node:http';
import { DressageError } from '../errors.js';
import { HttpError } from './http-error.js';
import { type RouteLookup, type RouteParameters, type RouteTable, requestPath } from './route-table.js';

/** A request no route takes: no route has its path, or none for its method (`allowed` has those). */
export type RouteMiss = Exclude<RouteLookup<never>, { kind: 'found' }>;

/** A route handler as {@link serve} calls it by default: it answers `response` itself. */
export type ServeHandler = (
  request: IncomingMessage,
  response: ServerResponse,
  parameters: RouteParameters,
) => unknown;

/** Options of {@link serve}. */
export interface ServeOptions<THandler> {
  /**
   * Runs the handler of the route that matched (a server's own handler shape: checks its auth, reads
   * its body). Default: calls it as a {@link ServeHandler}.
   */
  invoke?: (
    handler: THandler,
    request: IncomingMessage,
    response: ServerResponse,
    parameters: RouteParameters,
  ) => unknown;
  /**
   * Answers a request no route takes, or throws for `onError` to answer. Default: the request body
   * is discarded and a `not_found` DressageError (404) or a 405 {@link HttpError} naming the allowed
   * methods goes to `onError`.
   */
  notFound?: (request: IncomingMessage, response: ServerResponse, miss: RouteMiss) => unknown;
  /** Answers whatever a handler (or `notFound`) threw, in the server's own error envelope. */
  onError: (error: unknown, request: IncomingMessage, response: ServerResponse) => void;
}

/** The error {@link serve} answers a request no route takes with, unless told otherwise. */
export function routeMissError(miss: RouteMiss, method: string, path: string): DressageError {
  if (miss.kind === 'not_found') {
    return new DressageError({ code: 'not_found', message: `No route ${path}`, details: { path } });
  }
  return new HttpError({
    status: 405,
    message: `${method} is not allowed on ${path}`,
    details: { path, allowed: [...miss.allowed] },
  });
}

/**
 * The request listener of a server: looks each request up in `routes`, runs the handler that
 * matched, hands a request no route takes to `notFound`, and anything thrown (or rejected) to
 * `onError`. A path parameter the table refuses to decode is thrown too.
 *
 * @example
 * ```ts
 * const routes = new RouteTable<ServeHandler>().add('GET', '/health', (_, response) =>
 *   sendJson(response, 200, { ok: true }),
 * );
 * const server = createServer(
 *   serve(routes, { onError: (error, _, response) => sendJson(response, httpStatusOf(error), { error: String(error) }) }),
 * );
 * ```
 */
export function serve<THandler>(
  routes: RouteTable<THandler>,
  options: ServeOptions<THandler>,
): (request: IncomingMessage, response: ServerResponse) => Promise<void> {
  const invoke =
    options.invoke ??
    ((handler: THandler, request, response, parameters) =>
      (handler as ServeHandler)(request, response, parameters));
  const notFound =
    options.notFound ??
    ((request: IncomingMessage, _response: ServerResponse, miss: RouteMiss) => {
      request.resume();
      throw routeMissError(miss, request.method ?? 'GET', requestPath(request.url));
    });
  const { onError } = options;
  return async (request, response) => {
    try {
      const found = routes.lookup(request.method ?? 'GET', requestPath(request.url));
      if (found.kind === 'found') await invoke(found.handler, request, response, found.parameters);
      else await notFound(request, response, found);
    } catch (error) {
      onError(error, request, response);
    }
  };
}
