import { type ContextOverflowBody, contextOverflowBody, DressageError } from '@dressage/protocol';
import { HttpError, type HttpErrorOptions } from '@dressage/protocol/http';

/** Options of {@link ProxyHttpError}: those of every HttpError, with the body; the message defaults to the body's. */
export interface ProxyHttpErrorOptions extends Omit<HttpErrorOptions, 'message'> {
  /** The JSON body the proxy answers with. */
  body: unknown;
  message?: string;
}

/**
 * An error that leaves the proxy as an HTTP response with an exact status and JSON body. Most bodies
 * use FastAPI's `{"detail": ...}` envelope, as the reference does; context overflow is top-level.
 */
export class ProxyHttpError extends HttpError {
  /** The JSON body the proxy answers with. */
  readonly body: unknown;

  constructor({ body, message, details, ...options }: ProxyHttpErrorOptions) {
    super({
      ...options,
      message: message ?? describeBody(body) ?? `HTTP ${options.status}`,
      details: { status: options.status, ...details },
    });
    this.name = 'ProxyHttpError';
    this.body = body;
  }
}

function describeBody(body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const detail = (body as { detail?: unknown }).detail;
  if (typeof detail === 'string') return detail;
  if (typeof detail === 'object' && detail !== null) {
    const record = detail as Record<string, unknown>;
    const name = typeof record.error === 'string' ? record.error : (record.status as string | undefined);
    const text = typeof record.message === 'string' ? record.message : undefined;
    return [name, text].filter(Boolean).join(': ') || undefined;
  }
  const message = (body as { message?: unknown }).message;
  return typeof message === 'string' ? message : undefined;
}

/** `{"detail": detail}` with `status`. */
export function detailError(status: number, detail: string | Record<string, unknown>): ProxyHttpError {
  return new ProxyHttpError({ status, body: { detail } });
}

/** The 413 context-overflow error (top-level body, not wrapped in `detail`). */
export function contextOverflowError(details: ContextOverflowBody['details']): ProxyHttpError {
  return new ProxyHttpError({ status: 413, body: contextOverflowBody(details) });
}

/**
 * Converts any thrown value into status and body. A DressageError keeps its code's status and names
 * its message; anything else is a 500 `internal_error`.
 */
export function toHttpResponse(error: unknown): { status: number; body: unknown } {
  if (error instanceof ProxyHttpError) return { status: error.status, body: error.body };
  if (DressageError.isInstance(error)) {
    return { status: error.httpStatus, body: { detail: error.message } };
  }
  const message = error instanceof Error ? error.message : String(error);
  return { status: 500, body: { detail: { error: 'internal_error', message } } };
}
