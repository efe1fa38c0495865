import { DressageError, type ErrorCode } from '../errors.js';

// The code an HTTP status stands for: the gRPC canonical mapping (google.rpc.Code's "HTTP Mapping"
// and gRPC's HTTP-to-status table), the one table every Dressage server and client reads. Where two
// codes share a status, the general one: 409 is `aborted` (a conflict with the current state;
// `already_exists` is one kind), 400 is `invalid_argument`. Statuses gRPC leaves out take the
// nearest code: 405 is `unimplemented`, 408 `deadline_exceeded`, 413 and 507 `resource_exhausted`.
const codeByStatus: Readonly<Record<number, ErrorCode>> = {
  400: 'invalid_argument',
  401: 'unauthenticated',
  403: 'permission_denied',
  404: 'not_found',
  405: 'unimplemented',
  408: 'deadline_exceeded',
  409: 'aborted',
  413: 'resource_exhausted',
  429: 'resource_exhausted',
  499: 'cancelled',
  500: 'internal',
  501: 'unimplemented',
  502: 'unavailable',
  503: 'unavailable',
  504: 'deadline_exceeded',
  507: 'resource_exhausted',
};

/**
 * The error code an HTTP status stands for (`invalid_argument` for an unlisted 4xx, `internal` for a
 * 5xx). The inverse of `httpStatusByCode` wherever a status has one code.
 */
export function codeOfHttpStatus(status: number): ErrorCode {
  return codeByStatus[status] ?? (status >= 500 ? 'internal' : 'invalid_argument');
}

/** Options of {@link HttpError}. */
export interface HttpErrorOptions {
  /** The HTTP status the server answers with. */
  status: number;
  message: string;
  /** Defaults to the code the status stands for ({@link codeOfHttpStatus}). */
  code?: ErrorCode;
  details?: Record<string, unknown>;
  cause?: unknown;
}

/**
 * A {@link DressageError} answered with an exact HTTP status rather than its code's: the statuses a
 * wire format fixes (413 for a body over the limit, 408 for one too slow) where the code's own
 * status (`resource_exhausted` is 429) would be wrong. Servers subclass it for their own envelopes.
 */
export class HttpError extends DressageError {
  /** The HTTP status the server answers with. */
  readonly status: number;

  constructor({ status, message, code, details, cause }: HttpErrorOptions) {
    super({ message, code: code ?? codeOfHttpStatus(status), details, cause });
    this.name = 'HttpError';
    this.status = status;
  }

  override get httpStatus(): number {
    return this.status;
  }
}

/**
 * The HTTP status a thrown value is answered with: a {@link DressageError}'s (its code's status, or
 * the exact one of a subclass such as {@link HttpError}); 500 for anything else.
 */
export function httpStatusOf(error: unknown): number {
  return DressageError.isInstance(error) ? error.httpStatus : 500;
}
