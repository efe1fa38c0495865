import { DressageError } from '@dressage/protocol';

/** What a reward function may return: a number, or an object whose `rewardKey` entry is the number. */
export type RewardValue = number | Readonly<Record<string, unknown>>;

/**
 * Reads a sample's reward as a number, the way slime's trainer does: `null` is 0, a number is
 * itself, an object is read through `rewardKey` (a `null` entry is 0, as in the reference).
 *
 * An object without the configured key, an object with no key configured, or a value of any other
 * type is an `invalid_argument` error naming the key and `owner` (the sample, e.g. from
 * `describeSample`; a function is only called on error): read as 0 it would silently zero every
 * advantage of the batch.
 */
export function readRewardValue(
  reward: unknown,
  rewardKey?: string | null,
  owner: string | (() => string) = 'a sample',
): number {
  if (reward === null || reward === undefined) return 0;
  if (typeof reward === 'number') return reward;
  const where = () => (typeof owner === 'function' ? owner() : owner);
  if (typeof reward === 'object' && !Array.isArray(reward)) {
    const keys = Object.keys(reward);
    if (!rewardKey) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `${where()}: reward is an object (keys: ${keys.join(', ') || 'none'}) but no reward key is configured to read it`,
        details: { field: 'reward', keys },
      });
    }
    if (!Object.hasOwn(reward, rewardKey)) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `${where()}: reward has no "${rewardKey}" entry (the configured reward key; keys: ${keys.join(', ') || 'none'})`,
        details: { field: 'reward', reward_key: rewardKey, keys },
      });
    }
    const value = (reward as Record<string, unknown>)[rewardKey];
    if (value === null || value === undefined) return 0;
    if (typeof value === 'number') return value;
    throw new DressageError({
      code: 'invalid_argument',
      message: `${where()}: reward["${rewardKey}"] is ${JSON.stringify(value)}, not a number`,
      details: { field: `reward.${rewardKey}`, reward_key: rewardKey },
    });
  }
  throw new DressageError({
    code: 'invalid_argument',
    message: `${where()}: reward is ${JSON.stringify(reward) ?? String(reward)}, expected a number, null or an object read through the reward key`,
    details: { field: 'reward' },
  });
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
