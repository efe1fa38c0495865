import { createSample, DressageError, type Sample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { computeReward, computeRewards, dispatchRewards } from './dispatch.js';
import { RewardRegistry } from './registry.js';

async function rejection(promise: Promise<unknown>): Promise<DressageError> {
  try {
    await promise;
  } catch (error) {
    expect(DressageError.isInstance(error)).toBe(true);
    return error as DressageError;
  }
  throw new Error('expected a rejection');
}

function sample(index: number, fields: Parameters<typeof createSample>[0] = {}): Sample {
  return createSample({ index, group_index: 0, ...fields });
}

const base = { loadModulesFromEnvironment: false } as const;

describe('computeReward', () => {
  it('uses the default reward (contains_label) without metadata.reward_fn', async () => {
    const registry = new RewardRegistry();
    expect(await computeReward(sample(0, { response: 'it is 42', label: '42' }), { ...base, registry })).toBe(
      1,
    );
  });

  it('honours metadata.reward_fn per sample and a configured default', async () => {
    const registry = new RewardRegistry();
    registry.register('half', () => 0.5);
    const exact = sample(1, { response: 'x 42', label: '42', metadata: { reward_fn: 'exact_match' } });
    expect(await computeReward(exact, { ...base, registry })).toBe(0);
    expect(await computeReward(sample(2), { ...base, registry, defaultRewardFunction: 'half' })).toBe(0.5);
  });

  it('reads object rewards through the reward key', async () => {
    const registry = new RewardRegistry();
    registry.register('keyed', async () => ({ accuracy: 0.75 }));
    const keyed = sample(3, { metadata: { reward_fn: 'keyed' } });
    expect(await computeReward(keyed, { ...base, registry, rewardKey: 'accuracy' })).toBe(0.75);
    const error = await rejection(computeReward(keyed, { ...base, registry }));
    expect(error.message).toContain('no reward key');
  });

  it('names the function and the sample when a reward throws', async () => {
    const registry = new RewardRegistry();
    registry.register('broken', () => {
      throw new Error('division by zero');
    });
    const broken = sample(7, { group_index: 2, metadata: { reward_fn: 'broken', parent_traj_id: 's-9' } });
    const error = await rejection(computeReward(broken, { ...base, registry }));
    expect(error.message).toBe(
      'Reward function "broken" on sample (index 7, group 2, session s-9) threw: division by zero',
    );
    expect(error.cause).toBeInstanceOf(Error);
    expect(error.details).toMatchObject({ reward_fn: 'broken', sample_index: 7 });
  });

  it('names the function and sample when an async reward rejects', async () => {
    const registry = new RewardRegistry();
    registry.register('rejects', async () => Promise.reject(new Error('remote down')));
    const error = await rejection(
      computeReward(sample(4, { metadata: { reward_fn: 'rejects' } }), { ...base, registry }),
    );
    expect(error.message).toContain('"rejects" on sample (index 4, group 0) threw: remote down');
  });

  it('reports an unknown reward_fn with the registered names', async () => {
    const registry = new RewardRegistry({ builtins: false });
    registry.register('only', () => 1);
    const error = await rejection(
      computeReward(sample(0, { metadata: { reward_fn: 'nope' } }), { ...base, registry }),
    );
    expect(error.code).toBe('not_found');
    expect(error.message).toContain('registered: only');
  });

  it('rejects a non-string reward_fn', async () => {
    const error = await rejection(computeReward(sample(5, { metadata: { reward_fn: 3 } }), base));
    expect(error.code).toBe('invalid_argument');
    expect(error.message).toContain('metadata.reward_fn must be a string');
  });

  it('fails with deadline_exceeded past the timeout and aborts the signal', async () => {
    const registry = new RewardRegistry();
    let aborted = false;
    registry.register(
      'slow',
      (_sample, { signal }) =>
        new Promise<number>((resolve) => {
          signal.addEventListener('abort', () => {
            aborted = true;
            resolve(1);
          });
        }),
    );
    const error = await rejection(
      computeReward(sample(6, { metadata: { reward_fn: 'slow' } }), { ...base, registry, timeoutMs: 20 }),
    );
    expect(error.code).toBe('deadline_exceeded');
    expect(error.message).toBe(
      'Reward function "slow" on sample (index 6, group 0) did not finish within 20 ms',
    );
    expect(aborted).toBe(true);
  });

  it('stops when the caller aborts', async () => {
    const registry = new RewardRegistry();
    registry.register('never', () => new Promise<number>(() => {}));
    const controller = new AbortController();
    const pending = computeReward(sample(8, { metadata: { reward_fn: 'never' } }), {
      ...base,
      registry,
      signal: controller.signal,
    });
    controller.abort();
    expect((await rejection(pending)).code).toBe('cancelled');
  });
});

describe('computeRewards and dispatchRewards', () => {
  it('runs concurrently and keeps the input order', async () => {
    const registry = new RewardRegistry();
    let running = 0;
    let peak = 0;
    registry.register('delayed', async (item) => {
      running += 1;
      peak = Math.max(peak, running);
      // Later samples finish first, so order comes from the dispatcher, not from completion.
      await new Promise((resolve) => setTimeout(resolve, 5 * (5 - (item.index ?? 0))));
      running -= 1;
      return item.index ?? -1;
    });
    registry.register('sync', (item) => (item.index ?? 0) * 10);
    const samples = [0, 1, 2, 3, 4].map((index) =>
      sample(index, { metadata: { reward_fn: index === 2 ? 'sync' : 'delayed' } }),
    );
    expect(await computeRewards(samples, { ...base, registry })).toEqual([0, 1, 20, 3, 4]);
    expect(peak).toBe(4);
  });

  it('returns one number for one sample and a list for a list', async () => {
    const registry = new RewardRegistry();
    const one = sample(0, { response: 'a', label: 'a' });
    expect(await dispatchRewards(one, { ...base, registry })).toBe(1);
    expect(
      await dispatchRewards([one, sample(1, { response: 'b', label: 'a' })], { ...base, registry }),
    ).toEqual([1, 0]);
    expect(await dispatchRewards([], { ...base, registry })).toEqual([]);
  });
});

describe('reward args', () => {
  it("passes the run's settings, frozen, to every reward function", async () => {
    const registry = new RewardRegistry();
    const seen: unknown[] = [];
    registry.register('reads_args', (_sample, { args }) => {
      seen.push(args);
      expect(() => {
        (args.rollout as { max_new_tokens: number }).max_new_tokens = 1;
      }).toThrowError(TypeError);
      return (args.rollout as { max_new_tokens: number }).max_new_tokens / 100;
    });
    const settings = { seed: 3, rollout: { max_new_tokens: 40 } };
    const rewards = await computeRewards(
      [
        sample(0, { metadata: { reward_fn: 'reads_args' } }),
        sample(1, { metadata: { reward_fn: 'reads_args' } }),
      ],
      { ...base, registry, args: settings },
    );
    expect(rewards).toEqual([0.4, 0.4]);
    expect(seen).toEqual([settings, settings]);
  });

  it('gives an empty object when no settings are passed', async () => {
    const registry = new RewardRegistry();
    registry.register('counts_args', (_sample, { args }) => Object.keys(args).length);
    expect(
      await computeReward(sample(0, { metadata: { reward_fn: 'counts_args' } }), { ...base, registry }),
    ).toBe(0);
  });
});
