import type { IncomingMessage, ServerResponse } from 'node:http';
import { DressageError } from '../errors.js';
import { HttpError } from './http-error.js';

/** Options of {@link readBody}. */
export interface ReadBodyOptions {
  /** Largest body in bytes. */
  limit: number;
  /**
   * The error a body over the limit rejects with; `declared` is its `content-length` when that
   * alone is over. Default {@link bodyTooLarge}.
   */
  tooLarge?: (limit: number, declared: number | null) => Error;
  /** Milliseconds the whole body may take to arrive; null or absent for no limit. */
  timeoutMs?: number | null;
  /** The error a body too slow rejects with. Default an {@link HttpError} 408 naming the limit. */
  timedOut?: (timeoutMs: number) => Error;
  /**
   * The request's response: when a body too slow is given up it is told to close the connection
   * (a trickling client does not keep it). A body over the limit is drained instead, so the client,
   * still writing it, reads the answer rather than a reset.
   */
  response?: ServerResponse;
}

/** The default error of a body over `limit`: a 413 naming the limit (and the declared size). */
export function bodyTooLarge(limit: number, declared: number | null): HttpError {
  return new HttpError({
    status: 413,
    message:
      declared === null
        ? `Request body exceeds the limit of ${limit} bytes`
        : `Request body of ${declared} bytes exceeds the limit of ${limit} bytes`,
    details: { limit_bytes: limit },
  });
}

function bodyTimedOut(timeoutMs: number): HttpError {
  return new HttpError({
    status: 408,
    message: `Request body not received within ${timeoutMs / 1000} s`,
    details: { timeout_ms: timeoutMs },
  });
}

/**
 * Reads a request body of at most `limit` bytes. A declared `content-length` over the limit is
 * refused before a byte is read; a body that grows past it (chunked, or lying about its length) is
 * refused as soon as it does. Either way the rest is drained unread and the connection stays open,
 * so the client gets the answer rather than a reset. With `timeoutMs`, a body still arriving after that long is refused too (a client
 * trickling its body does not hold a connection and its buffers forever).
 */
export function readBody(request: IncomingMessage, options: ReadBodyOptions): Promise<Buffer> {
  const { limit, response } = options;
  const tooLarge = options.tooLarge ?? bodyTooLarge;
  const giveUp = (error: Error): Error => {
    if (response !== undefined && !request.complete && !response.headersSent)
      response.setHeader('connection', 'close');
    return error;
  };
  const declared = Number(request.headers['content-length'] ?? '0');
  if (declared > limit) {
    // Drained, not closed: closing while the client still writes the body resets the connection
    // before it reads the 413.
    request.resume();
    return Promise.reject(tooLarge(limit, declared));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    const timeoutMs = options.timeoutMs ?? null;
    const timer =
      timeoutMs === null
        ? undefined
        : setTimeout(() => {
            failed = true;
            chunks.length = 0;
            reject(giveUp((options.timedOut ?? bodyTimedOut)(timeoutMs)));
          }, timeoutMs);
    request.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.length;
      if (size > limit) {
        failed = true;
        chunks.length = 0;
        clearTimeout(timer);
        reject(tooLarge(limit, null));
        return;
      }
      chunks.push(chunk);
    });
    request.on('end', () => {
      clearTimeout(timer);
      // Always a copy: a chunk can be a view of a larger socket buffer the caller would keep alive.
      if (!failed) resolve(Buffer.concat(chunks));
    });
    request.on('error', (error) => {
      clearTimeout(timer);
      failed = true;
      reject(error);
    });
  });
}

/** Options of {@link parseJsonBody}. */
export interface ParseJsonBodyOptions {
  /** What a body of only whitespace (or nothing) parses to. Default `{}`. */
  empty?: unknown;
  /** The error malformed JSON throws. Default a `DressageError` `invalid_argument` (400). */
  invalid?: (error: SyntaxError) => Error;
}

/**
 * Parses a JSON request body.
 *
 * @throws DressageError `invalid_argument` (or `options.invalid`'s error) for malformed JSON.
 */
export function parseJsonBody(bytes: Buffer, options: ParseJsonBodyOptions = {}): unknown {
  const text = bytes.toString('utf8');
  if (text.trim() === '') return 'empty' in options ? options.empty : {};
  try {
    return JSON.parse(text);
  } catch (error) {
    const syntax = error as SyntaxError;
    throw (
      options.invalid?.(syntax) ??
      new DressageError({
        code: 'invalid_argument',
        message: `Request body is not valid JSON: ${syntax.message}`,
        cause: error,
      })
    );
  }
}
