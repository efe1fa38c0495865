/**
 * The closed set of error codes every Dressage package uses. The vocabulary is gRPC's (so the trainer
 * bridge maps codes one to one), spelled in snake_case like the rest of the wire formats.
 */
export const errorCodes = [
  'cancelled',
  'unknown',
  'invalid_argument',
  'deadline_exceeded',
  'not_found',
  'already_exists',
  'permission_denied',
  'resource_exhausted',
  'failed_precondition',
  'aborted',
  'out_of_range',
  'unimplemented',
  'internal',
  'unavailable',
  'data_loss',
  'unauthenticated',
] as const;

/** One of {@link errorCodes}. */
export type ErrorCode = (typeof errorCodes)[number];

/** The gRPC status number of each code, in gRPC's numbering. */
export const grpcStatusByCode: Readonly<Record<ErrorCode, number>> = {
  cancelled: 1,
  unknown: 2,
  invalid_argument: 3,
  deadline_exceeded: 4,
  not_found: 5,
  already_exists: 6,
  permission_denied: 7,
  resource_exhausted: 8,
  failed_precondition: 9,
  aborted: 10,
  out_of_range: 11,
  unimplemented: 12,
  internal: 13,
  unavailable: 14,
  data_loss: 15,
  unauthenticated: 16,
};

/**
 * The HTTP status a server answers with for each code. 499 is the de-facto "client closed request".
 */
export const httpStatusByCode: Readonly<Record<ErrorCode, number>> = {
  cancelled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
};

// Transient conditions: retrying the same call later can succeed.
const retryableCodes: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'unavailable',
  'deadline_exceeded',
  'resource_exhausted',
  'aborted',
]);

const codeSet: ReadonlySet<string> = new Set(errorCodes);

/** True when `value` is one of the {@link errorCodes}. */
export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && codeSet.has(value);
}

// Symbol.for gives the same symbol in every copy of this package, so identity checks survive
// two installed versions (a consumer's and a dependency's) where `instanceof` would not.
const marker = Symbol.for('dressage.error');

/** Options of {@link DressageError}. */
export interface DressageErrorOptions {
  /** What went wrong, in a sentence a user can act on. */
  message: string;
  /** Defaults to `internal`. */
  code?: ErrorCode;
  /** The underlying error, kept for logs. */
  cause?: unknown;
  /** Structured context (ids, limits, field paths). Serialisable to JSON. */
  details?: Record<string, unknown>;
  /** Overrides the code's default retryability. */
  isRetryable?: boolean;
}

/**
 * The one error base class of Dressage. Every package throws it (or a subclass), with a code from
 * the closed {@link ErrorCode} set.
 *
 * @example
 * ```ts
 * try { await client.train(batch); }
 * catch (error) {
 *   if (DressageError.isInstance(error) && error.isRetryable) scheduleRetry();
 *   else throw error;
 * }
 * ```
 */
export class DressageError extends Error {
  readonly code: ErrorCode;
  readonly details: Readonly<Record<string, unknown>>;
  readonly isRetryable: boolean;

  constructor({ message, code = 'internal', cause, details, isRetryable }: DressageErrorOptions) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'DressageError';
    Object.defineProperty(this, marker, { value: true });
    this.code = code;
    this.details = details ?? {};
    this.isRetryable = isRetryable ?? retryableCodes.has(code);
  }

  /** The HTTP status this error maps to. */
  get httpStatus(): number {
    return httpStatusByCode[this.code];
  }

  /** The gRPC status number this error maps to. */
  get grpcStatus(): number {
    return grpcStatusByCode[this.code];
  }

  /** True for any DressageError, including one thrown by another installed copy of this package. */
  static isInstance(error: unknown): error is DressageError {
    return typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[marker] === true;
  }

  // Makes `error instanceof DressageError` agree with isInstance for the base class; subclasses keep
  // the ordinary prototype check so `instanceof Subclass` still narrows precisely.
  static override [Symbol.hasInstance](instance: unknown): boolean {
    // biome-ignore lint/complexity/noThisInStatic: `this` tells the base class from a subclass here.
    if (this === DressageError) return DressageError.isInstance(instance);
    // biome-ignore lint/complexity/noThisInStatic: the ordinary prototype check of the subclass.
    return Function.prototype[Symbol.hasInstance].call(this, instance);
  }

  /**
   * Normalises any caught value: a DressageError is returned as is, anything else is wrapped with
   * `code` (default `unknown`) and kept as `cause`.
   */
  static from(reason: unknown, code: ErrorCode = 'unknown'): DressageError {
    if (DressageError.isInstance(reason)) return reason;
    const message = reason instanceof Error ? reason.message : String(reason);
    return new DressageError({ message, code, cause: reason });
  }

  /** A plain object for logs and JSON responses (the cause is summarised, not serialised). */
  toJSON(): { name: string; code: ErrorCode; message: string; details: Record<string, unknown> } {
    return { name: this.name, code: this.code, message: this.message, details: { ...this.details } };
  }
}
