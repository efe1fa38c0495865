import { DressageError } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { BlackboxCallError } from '../paddock/blackbox-client.js';
import { AdapterOptionsError } from './adapter.js';
import { BlackboxHttpError } from './http-error.js';

describe('paddock errors', () => {
  it('are DressageErrors with a code that matches the status they answer', () => {
    const conflict = new BlackboxHttpError({
      status: 409,
      error: 'session_desynced',
      message: 'Session is desynced',
      details: { turn_id: 't' },
    });
    const timeout = new BlackboxHttpError({
      status: 504,
      error: 'backend_timeout',
      message: 'Backend did not finish',
    });
    expect(DressageError.isInstance(conflict)).toBe(true);
    // 409 is a conflict with the session's state: `aborted`, as gRPC maps it.
    expect([conflict.code, conflict.httpStatus, conflict.error, conflict.details]).toEqual([
      'aborted',
      409,
      'session_desynced',
      { turn_id: 't' },
    ]);
    expect([timeout.code, timeout.httpStatus, timeout.isRetryable]).toEqual(['deadline_exceeded', 504, true]);
  });

  it('code adapter option problems and BlackboxServer answers', () => {
    const options = new AdapterOptionsError('model is required', [{ path: 'model' }]);
    expect([DressageError.isInstance(options), options.code, options.errors]).toEqual([
      true,
      'invalid_argument',
      [{ path: 'model' }],
    ]);
    const call = new BlackboxCallError(503, { error: 'backend_unavailable', message: 'down' });
    expect([DressageError.isInstance(call), call.code, call.error, call.isRetryable]).toEqual([
      true,
      'unavailable',
      'backend_unavailable',
      true,
    ]);
  });
});
