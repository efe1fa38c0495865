import { createSample } from '@dressage/protocol';
import { rewardPostProcess } from '@dressage/trainer-bridge';
import { describe, expect, it } from 'vitest';
import { minimalRecipe } from './__fixtures__/minimal-recipe.js';
import { conversionOptionsOf } from './conversion-options.js';
import { parseRecipe } from './recipe.js';

// A nearly solved group: seven of eight samples right.
const group = [1, 1, 1, 1, 1, 1, 1, 0].map((reward) => createSample({ group_index: 0, reward }));

describe('conversion options', () => {
  it('divide GRPO advantages by the group standard deviation by default', () => {
    const options = conversionOptionsOf(parseRecipe(minimalRecipe), 8, null);
    expect(options).toMatchObject({ advantageEstimator: 'grpo', standardDeviationNormalization: true });
    const { rewards } = rewardPostProcess(group, options);
    // Centred on 0.875, divided by the population deviation sqrt(7) / 8.
    expect(rewards[7]).toBeCloseTo(-0.875 / (Math.sqrt(7) / 8), 12);
    expect(rewards[7]).toBeCloseTo(-2.6458, 4);
  });

  it('leave them centred only with loss.grpo_std_normalization false (Dr. GRPO)', () => {
    const recipe = parseRecipe(`${minimalRecipe}loss: { grpo_std_normalization: false }\n`);
    const options = conversionOptionsOf(recipe, 8, null);
    expect(options.standardDeviationNormalization).toBe(false);
    const { rewards } = rewardPostProcess(group, options);
    expect(rewards[7]).toBeCloseTo(-0.875, 12);
    expect(rewards[0]).toBeCloseTo(0.125, 12);
  });

  it('hand a reward_post_process hook to the conversion in place of the default', () => {
    const hook = () => ({ rawRewards: [], rewards: [] });
    expect(conversionOptionsOf(parseRecipe(minimalRecipe), 8, hook).rewardPostProcess).toBe(hook);
    expect(conversionOptionsOf(parseRecipe(minimalRecipe), 8, null)).not.toHaveProperty('rewardPostProcess');
  });
});
