import { DressageError, type ErrorCode, issuesFromZodError } from '@dressage/protocol';
import type { z } from 'zod';

// The BlackboxServer answers the reference's statuses; the code is the nearest one of the closed set.
const codeByStatus: Readonly<Record<number, ErrorCode>> = {
  400: 'invalid_argument',
  401: 'unauthenticated',
  403: 'permission_denied',
  404: 'not_found',
  409: 'failed_precondition',
  413: 'resource_exhausted',
  429: 'resource_exhausted',
  499: 'cancelled',
  500: 'internal',
  502: 'unavailable',
  503: 'unavailable',
  504: 'deadline_exceeded',
};

/** The error code an HTTP status of the BlackboxServer API stands for. */
export function codeOfStatus(status: number): ErrorCode {
  return codeByStatus[status] ?? (status >= 500 ? 'internal' : 'invalid_argument');
}

/** An error answered with the BlackboxServer envelope `{request_id, error, message, details}`. */
export class BlackboxHttpError extends DressageError {
  /** The HTTP status the server answers with. */
  readonly status: number;
  /** The reference's error name (`request_error`, `conflict`, `backend_timeout`, ...). */
  readonly error: string;

  constructor(status: number, error: string, message: string, details: Record<string, unknown> = {}) {
    super({
      message,
      code: codeOfStatus(status),
      details,
    });
    this.name = 'BlackboxHttpError';
    this.status = status;
    this.error = error;
  }

  override get httpStatus(): number {
    return this.status;
  }
}

/** A 400 `request_error` listing the request's invalid fields. */
export function validationError(error: z.ZodError, where: string): BlackboxHttpError {
  return new BlackboxHttpError(400, 'request_error', `Invalid ${where}`, {
    errors: issuesFromZodError(error),
  });
}

/** Parses a request body, answering 400 with the invalid fields when it does not fit. */
export function parseBody<T extends z.ZodType>(schema: T, body: unknown, where: string): z.output<T> {
  const result = schema.safeParse(body);
  if (!result.success) throw validationError(result.error, where);
  return result.data;
}

/** A 404 for a turn id the session does not know. */
export function unknownTurn(turnId: string): BlackboxHttpError {
  return new BlackboxHttpError(404, 'not_found', `Unknown turn ${turnId}`, { turn_id: turnId });
}
