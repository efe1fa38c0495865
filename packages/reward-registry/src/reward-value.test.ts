import { DressageError } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { readRewardValue, requireRewardNumber } from './reward-value.js';

describe('readRewardValue', () => {
  it('reads null as 0, numbers as themselves and objects through the key', () => {
    expect(readRewardValue(null)).toBe(0);
    expect(readRewardValue(undefined)).toBe(0);
    expect(readRewardValue(1.5)).toBe(1.5);
    expect(readRewardValue({ score: 2, other: 9 }, 'score')).toBe(2);
    expect(readRewardValue({ score: 2 }, 'missing')).toBe(0);
    expect(readRewardValue({ score: 2 })).toBe(0);
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
