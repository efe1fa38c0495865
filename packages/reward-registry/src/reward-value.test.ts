import { DressageError } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { readRewardValue, requireRewardNumber } from './reward-value.js';

function caught(run: () => unknown): DressageError {
  try {
    run();
  } catch (error) {
    if (DressageError.isInstance(error)) return error;
    throw error;
  }
  throw new Error('expected a DressageError');
}

describe('readRewardValue', () => {
  it('reads null as 0, numbers as themselves and objects through the key', () => {
    expect(readRewardValue(null)).toBe(0);
    expect(readRewardValue(undefined)).toBe(0);
    expect(readRewardValue(1.5)).toBe(1.5);
    expect(readRewardValue({ score: 2, other: 9 }, 'score')).toBe(2);
    // slime reads a null entry as 0.
    expect(readRewardValue({ score: null }, 'score')).toBe(0);
  });

  it('rejects an object without the configured key, naming the key and the sample', () => {
    const error = caught(() => readRewardValue({ score: 2 }, 'scroe', 'sample (index 7)'));
    expect(error.code).toBe('invalid_argument');
    expect(error.message).toContain('"scroe"');
    expect(error.message).toContain('sample (index 7)');
    expect(error.message).toContain('score');
    expect(error.details).toMatchObject({ reward_key: 'scroe' });
  });

  it('rejects objects with no key configured and values of other types', () => {
    let described = 0;
    const owner = () => {
      described += 1;
      return 'sample (index 1)';
    };
    expect(readRewardValue(1, null, owner)).toBe(1);
    // The description is only built for an error.
    expect(described).toBe(0);
    for (const [value, key] of [
      [{ score: 2 }, null],
      [{ score: 'high' }, 'score'],
      ['1', 'score'],
      [[1], 'score'],
      [true, null],
    ] as const) {
      const error = caught(() => readRewardValue(value, key, owner));
      expect(error.code).toBe('invalid_argument');
      expect(error.message).toContain('sample (index 1)');
    }
  });
});

describe('requireRewardNumber', () => {
  it('accepts finite numbers and keyed objects', () => {
    expect(requireRewardNumber(0.5, null, 'f')).toBe(0.5);
    expect(requireRewardNumber({ acc: 1 }, 'acc', 'f')).toBe(1);
  });
  it('rejects everything else with a message naming the caller', () => {
    for (const [value, key] of [
      [Number.NaN, null],
      [{ acc: 1 }, null],
      [{ acc: 'x' }, 'acc'],
      ['1', null],
      [[1], 'acc'],
    ] as const) {
      let caught: unknown;
      try {
        requireRewardNumber(value, key, 'Reward function "f" on sample (index 3)');
      } catch (error) {
        caught = error;
      }
      expect(DressageError.isInstance(caught)).toBe(true);
      expect((caught as DressageError).code).toBe('invalid_argument');
      expect((caught as DressageError).message).toContain('Reward function "f" on sample (index 3)');
    }
  });
});
