import { issuesFromZodError } from '@dressage/protocol';
import { HttpError, type HttpErrorOptions } from '@dressage/protocol/http';
import type { z } from 'zod';

/** Options of {@link BlackboxHttpError}: those of every HttpError, and the reference's error name. */
export interface BlackboxHttpErrorOptions extends HttpErrorOptions {
  /** The reference's error name (`request_error`, `conflict`, `backend_timeout`, ...). */
  error: string;
}

/** An error answered with the BlackboxServer envelope `{request_id, error, message, details}`. */
export class BlackboxHttpError extends HttpError {
  /** The reference's error name (`request_error`, `conflict`, `backend_timeout`, ...). */
  readonly error: string;

  constructor({ error, details = {}, ...options }: BlackboxHttpErrorOptions) {
    super({ ...options, details });
    this.name = 'BlackboxHttpError';
    this.error = error;
  }
}

/** A 400 `request_error` listing the request's invalid fields. */
export function validationError(error: z.ZodError, where: string): BlackboxHttpError {
  return new BlackboxHttpError({
    status: 400,
    error: 'request_error',
    message: `Invalid ${where}`,
    details: {
      errors: issuesFromZodError(error),
    },
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
  return new BlackboxHttpError({
    status: 404,
    error: 'not_found',
    message: `Unknown turn ${turnId}`,
    details: { turn_id: turnId },
  });
}
