import { DressageError } from '../errors.js';

/** Path parameters of a matched route, by name, percent-decoded. */
export type RouteParameters = Readonly<Record<string, string>>;

/** What {@link RouteTable.lookup} finds for a method and path. */
export type RouteLookup<THandler> =
  | { readonly kind: 'found'; readonly handler: THandler; readonly parameters: RouteParameters }
  /** The path names a route, but not for this method; `allowed` lists the methods it has. */
  | { readonly kind: 'method_not_allowed'; readonly allowed: readonly string[] }
  | { readonly kind: 'not_found' };

/** Options of {@link RouteTable}. */
export interface RouteTableOptions {
  /**
   * Decodes one captured path segment (still percent-encoded) of a route that matched; throw to
   * refuse it, e.g. with the server's own 400 for an invalid id. Default {@link decodePathParameter}.
   */
  decodeParameter?: (raw: string, name: string) => string;
}

const noParameters: RouteParameters = Object.freeze({});
const parameterSegment = /^\{([A-Za-z_][A-Za-z0-9_]*)\}$/;

interface PatternRoute<THandler> {
  pattern: string;
  /** A literal segment, or the name of the parameter it captures (`names[index]` set). */
  segments: readonly string[];
  names: readonly (string | undefined)[];
  handlers: Map<string, THandler>;
}

/**
 * Decodes a percent-encoded path segment.
 *
 * @throws DressageError `invalid_argument` (400) naming the parameter when an escape is malformed.
 */
export function decodePathParameter(raw: string, name: string): string {
  if (!raw.includes('%')) return raw;
  try {
    return decodeURIComponent(raw);
  } catch {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Malformed %-encoding in the path parameter ${name}`,
      details: { parameter: name, value: raw },
    });
  }
}

/**
 * The path of a request target as routes match it: without the query, and without trailing slashes
 * (`/v1/models/` is `/v1/models`; an empty path is `/`).
 */
export function requestPath(target: string | undefined): string {
  if (target === undefined || target === '') return '/';
  const query = target.indexOf('?');
  let path = query === -1 ? target : target.slice(0, query);
  let end = path.length;
  while (end > 0 && path.charCodeAt(end - 1) === 0x2f) end--;
  if (end !== path.length) path = path.slice(0, end);
  return path === '' ? '/' : path;
}

/**
 * A route table: method and path pattern to handler. Patterns are literal paths (`/v1/models`) or
 * have whole-segment parameters (`/s/{session}/v1/chat/completions`). A literal path is one map
 * look-up, so a server's hot route costs what a hand-written `Map` did; patterns are tried in the
 * order they were added, and a literal path wins over a pattern. Parameters are captured before
 * decoding (an encoded `/` stays inside its segment) and decoded only for the route that matched.
 *
 * @example
 * ```ts
 * const routes = new RouteTable<(parameters: RouteParameters) => unknown>()
 *   .add('GET', '/health', () => ({ ok: true }))
 *   .add('POST', '/v1/sessions/{session}/abort', ({ session }) => abort(session));
 * const found = routes.lookup(request.method ?? 'GET', requestPath(request.url));
 * if (found.kind === 'found') sendJson(response, 200, await found.handler(found.parameters));
 * ```
 */
export class RouteTable<THandler> {
  readonly #literal = new Map<string, Map<string, THandler>>();
  readonly #patterns: PatternRoute<THandler>[] = [];
  readonly #decodeParameter: (raw: string, name: string) => string;

  constructor(options: RouteTableOptions = {}) {
    this.#decodeParameter = options.decodeParameter ?? decodePathParameter;
  }

  /**
   * Adds a route for one or more methods.
   *
   * @throws DressageError `invalid_argument` for a pattern that does not start with `/`, has a
   * malformed or repeated parameter, or a method and pattern already added.
   */
  add(methods: string | readonly string[], pattern: string, handler: THandler): this {
    if (!pattern.startsWith('/')) throw invalidPattern(pattern, 'it must start with /');
    const segments = pattern.split('/');
    const names = segments.map((segment) => parameterSegment.exec(segment)?.[1]);
    let handlers: Map<string, THandler> | undefined;
    if (names.every((name) => name === undefined)) {
      if (segments.some((segment) => segment.includes('{') || segment.includes('}')))
        throw invalidPattern(pattern, 'a parameter must be a whole segment, {name}');
      handlers = this.#literal.get(pattern);
      if (handlers === undefined) {
        handlers = new Map();
        this.#literal.set(pattern, handlers);
      }
    } else {
      const seen = new Set<string>();
      for (const [index, name] of names.entries()) {
        const segment = segments[index]!;
        if (name === undefined && (segment.includes('{') || segment.includes('}')))
          throw invalidPattern(pattern, 'a parameter must be a whole segment, {name}');
        if (name !== undefined && seen.has(name)) throw invalidPattern(pattern, `{${name}} appears twice`);
        if (name !== undefined) seen.add(name);
      }
      handlers = this.#patterns.find((route) => route.pattern === pattern)?.handlers;
      if (handlers === undefined) {
        handlers = new Map();
        this.#patterns.push({ pattern, segments, names, handlers });
      }
    }
    for (const method of typeof methods === 'string' ? [methods] : methods) {
      if (handlers.has(method)) throw invalidPattern(pattern, `${method} is already routed`);
      handlers.set(method, handler);
    }
    return this;
  }

  /**
   * Finds the route of `method` and `path` (a path as {@link requestPath} gives it).
   *
   * @throws whatever the table's `decodeParameter` throws for a parameter of the matched route.
   */
  lookup(method: string, path: string): RouteLookup<THandler> {
    const literal = this.#literal.get(path);
    if (literal !== undefined) {
      const handler = literal.get(method);
      if (handler !== undefined) return { kind: 'found', handler, parameters: noParameters };
    }
    let allowed: string[] | null = literal === undefined ? null : [...literal.keys()];
    for (const route of this.#patterns) {
      const captured = captureSegments(route, path);
      if (captured === null) continue;
      const handler = route.handlers.get(method);
      if (handler === undefined) {
        allowed = [...(allowed ?? []), ...route.handlers.keys()];
        continue;
      }
      const parameters: Record<string, string> = {};
      for (let index = 0; index < captured.length; index += 2) {
        const name = captured[index]!;
        parameters[name] = this.#decodeParameter(captured[index + 1]!, name);
      }
      return { kind: 'found', handler, parameters };
    }
    if (allowed === null) return { kind: 'not_found' };
    return { kind: 'method_not_allowed', allowed: [...new Set(allowed)] };
  }
}

// Matches `path` against a pattern segment by segment without splitting it (no array per request):
// null when it does not match, else the captured [name, raw value, ...] pairs.
function captureSegments(route: PatternRoute<unknown>, path: string): string[] | null {
  const captured: string[] = [];
  // Both start with `/`: segment 0 is the empty string before it.
  let start = 1;
  const last = route.segments.length - 1;
  for (let index = 1; index <= last; index++) {
    if (start > path.length) return null;
    let end = path.indexOf('/', start);
    if (end === -1) end = path.length;
    // More segments in the path than in the pattern.
    else if (index === last) return null;
    const name = route.names[index];
    if (name !== undefined) {
      // A parameter captures one non-empty segment.
      if (end === start) return null;
      captured.push(name, path.slice(start, end));
    } else {
      const literal = route.segments[index]!;
      if (end - start !== literal.length || !path.startsWith(literal, start)) return null;
    }
    start = end + 1;
  }
  return start > path.length ? captured : null;
}

function invalidPattern(pattern: string, reason: string): DressageError {
  return new DressageError({
    code: 'invalid_argument',
    message: `Route pattern ${pattern}: ${reason}`,
    details: { pattern },
  });
}
