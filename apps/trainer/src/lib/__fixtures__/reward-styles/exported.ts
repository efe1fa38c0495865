// A reward module that exports its functions as `rewards`. It reads the run's settings (`args`):
// the reward is the recipe's seed over 100, and a mutation of the settings must fail.
import type { RewardContext } from '@dressage/reward-registry';

export const rewards = {
  exported_style(_sample: unknown, { args }: RewardContext): number {
    const rollout = args.rollout as { max_new_tokens: number };
    if (!Object.isFrozen(args) || !Object.isFrozen(rollout)) throw new Error('the run settings are writable');
    return (args.seed as number) / 100;
  },
};
