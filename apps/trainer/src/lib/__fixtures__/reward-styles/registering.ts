// A reward module that registers its function through an exported `register(registry)`.
import type { RewardRegistry } from '@dressage/reward-registry';

export function register(registry: RewardRegistry): void {
  registry.register('register_style', (_sample, { args }) =>
    (args.data as { n_samples_per_prompt: number }).n_samples_per_prompt === 2 ? 0.5 : -1,
  );
}
