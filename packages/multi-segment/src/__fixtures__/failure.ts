import { DressageError } from '@dressage/protocol';
import { expect } from 'vitest';

/** Runs `run` and returns the `DressageError` it threw; fails the test if it threw nothing or another error. */
export function failure(run: () => unknown): DressageError {
  try {
    run();
  } catch (error) {
    expect(DressageError.isInstance(error)).toBe(true);
    return error as DressageError;
  }
  throw new Error('expected an error');
}
