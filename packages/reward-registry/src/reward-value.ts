import { DressageError } from '@dressage/protocol';

/** What a reward function may return: a number, or an object whose `rewardKey` entry is the number. */
export type RewardValue = number | Readonly<Record<string, unknown>>;

/**
 * Reads a sample's reward as a number, the way slime's trainer does: `null` is 0, a number is
 * itself, an object is read through `rewardKey` (a missing or non-numeric entry, or no key, is 0).
 * This is the lenient read used on samples that already went through reward computation.
 */
export function readRewardValue(reward: unknown, rewardKey?: string | null): number {
  if (reward === null || reward === undefined) return 0;
  if (typeof reward === 'number') return reward;
  if (typeof reward === 'object' && rewardKey) {
    const value = (reward as Record<string, unknown>)[rewardKey];
    return typeof value === 'number' ? value : 0;
  }
  return 0;
}

/**
 * Reads what a reward function returned, strictly: a finite number, or an object holding a finite
 * number under `rewardKey`. Anything else is an `invalid_argument` error whose message is prefixed
 * by `where` (the function and sample).
 */
export function requireRewardNumber(
  value: unknown,
  rewardKey: string | null | undefined,
  where: string,
): number {
  if (typeof value === 'number') {
    if (Number.isFinite(value)) return value;
    throw new DressageError({
      code: 'invalid_argument',
      message: `${where} returned ${value}, not a finite number`,
    });
  }
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    if (!rewardKey) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `${where} returned an object but no reward key is configured to read it (keys: ${Object.keys(value).join(', ') || 'none'})`,
      });
    }
    const entry = (value as Record<string, unknown>)[rewardKey];
    if (typeof entry === 'number' && Number.isFinite(entry)) return entry;
    throw new DressageError({
      code: 'invalid_argument',
      message: `${where} returned an object whose "${rewardKey}" entry is ${JSON.stringify(entry) ?? 'undefined'}, not a finite number`,
      details: { reward_key: rewardKey },
    });
  }
  throw new DressageError({
    code: 'invalid_argument',
    message: `${where} returned ${JSON.stringify(value) ?? String(value)}, expected a number or an object read through a reward key`,
  });
}
