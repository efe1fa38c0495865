import { describe, expect, it } from 'vitest';
import { DressageError, errorCodes, grpcStatusByCode, httpStatusByCode, isErrorCode } from './errors.js';

describe('DressageError', () => {
  it('carries code, details, cause and retryability derived from the code', () => {
    const cause = new Error('socket hang up');
    const error = new DressageError({
      code: 'unavailable',
      message: 'trainer unreachable',
      cause,
      details: { address: '127.0.0.1:50051' },
    });
    expect(error.code).toBe('unavailable');
    expect(error.message).toBe('trainer unreachable');
    expect(error.cause).toBe(cause);
    expect(error.details).toEqual({ address: '127.0.0.1:50051' });
    expect(error.isRetryable).toBe(true);
    expect(error.httpStatus).toBe(503);
    expect(error.grpcStatus).toBe(14);
    expect(error.name).toBe('DressageError');
    expect(error).toBeInstanceOf(Error);
  });

  it('defaults to internal, not retryable, and lets callers override retryability', () => {
    const plain = new DressageError({ message: 'boom' });
    expect(plain.code).toBe('internal');
    expect(plain.isRetryable).toBe(false);
    expect(new DressageError({ message: 'x', code: 'invalid_argument', isRetryable: true }).isRetryable).toBe(
      true,
    );
    expect(new DressageError({ message: 'x', code: 'unavailable', isRetryable: false }).isRetryable).toBe(
      false,
    );
  });

  it('maps every code to an HTTP status and a gRPC status', () => {
    const grpc = new Set<number>();
    for (const code of errorCodes) {
      expect(httpStatusByCode[code]).toBeGreaterThanOrEqual(400);
      grpc.add(grpcStatusByCode[code]);
    }
    expect(grpc.size).toBe(errorCodes.length);
    expect(httpStatusByCode.invalid_argument).toBe(400);
    expect(httpStatusByCode.not_found).toBe(404);
    expect(httpStatusByCode.unauthenticated).toBe(401);
  });

  it('recognises instances from another copy of the package through the shared symbol', () => {
    // Simulates an error built by a second installed copy: same global symbol, different class.
    const foreign = Object.assign(new Error('from another copy'), { code: 'aborted' });
    Object.defineProperty(foreign, Symbol.for('dressage.error'), { value: true });
    expect(DressageError.isInstance(foreign)).toBe(true);
    expect(foreign instanceof DressageError).toBe(true);
    expect(DressageError.isInstance(new Error('plain'))).toBe(false);
    expect(new Error('plain') instanceof DressageError).toBe(false);
    expect(DressageError.isInstance(null)).toBe(false);
    expect(DressageError.isInstance('string')).toBe(false);
  });

  it('keeps precise instanceof checks for subclasses', () => {
    class TokenizationError extends DressageError {}
    const sub = new TokenizationError({ message: 'bad template', code: 'failed_precondition' });
    const base = new DressageError({ message: 'other' });
    expect(sub instanceof TokenizationError).toBe(true);
    expect(sub instanceof DressageError).toBe(true);
    expect(base instanceof TokenizationError).toBe(false);
  });

  it('normalises caught values with from()', () => {
    const original = new DressageError({ message: 'kept', code: 'not_found' });
    expect(DressageError.from(original)).toBe(original);
    const wrapped = DressageError.from(new TypeError('bad'), 'invalid_argument');
    expect(wrapped.code).toBe('invalid_argument');
    expect(wrapped.message).toBe('bad');
    expect(wrapped.cause).toBeInstanceOf(TypeError);
    expect(DressageError.from('text').code).toBe('unknown');
  });

  it('serialises to JSON without the cause and without the identity marker', () => {
    const error = new DressageError({ message: 'm', code: 'data_loss', details: { field: 'tokens' } });
    expect(JSON.parse(JSON.stringify(error))).toEqual({
      name: 'DressageError',
      code: 'data_loss',
      message: 'm',
      details: { field: 'tokens' },
    });
  });

  it('validates code names', () => {
    expect(isErrorCode('not_found')).toBe(true);
    expect(isErrorCode('NOT_FOUND')).toBe(false);
    expect(isErrorCode(5)).toBe(false);
  });
});
