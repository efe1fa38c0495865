import { resolve } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { resolveSchedulerOptions } from '@dressage/schedulers';
import { describe, expect, it } from 'vitest';
import { minimalRecipe } from './__fixtures__/minimal-recipe.js';
import { parseRecipe } from './recipe.js';
import { recipeEnvironmentVariables } from './recipe-environment.js';
import { schedulerOptionsOf } from './scheduler-options.js';

// What the scheduler of a run of this recipe resolves, in this environment.
function schedulerOf(text: string, env: Record<string, string>) {
  return resolveSchedulerOptions(schedulerOptionsOf(parseRecipe(text, 'recipe', env), 4), { env });
}

describe('recipe settings and the environment', () => {
  it('take the environment where the recipe leaves a key unset: a default never beats it', () => {
    const env = { DRESSAGE_ROLLOUT_MAX_RETRIES: '5' };
    expect(schedulerOf(minimalRecipe, env).maxRetries).toBe(5);
    expect(schedulerOf(minimalRecipe, {}).maxRetries).toBe(2);
  });

  it('take the value the recipe writes over the environment', () => {
    const env = { DRESSAGE_ROLLOUT_MAX_RETRIES: '5', DRESSAGE_STALENESS_RECALL_IN_FLIGHT: 'true' };
    const text = `${minimalRecipe}rollout: { max_retries: 1, recall_stale_groups: false }\n`;
    expect(schedulerOf(text, env)).toMatchObject({ maxRetries: 1, stalenessRecallInFlight: false });
    expect(schedulerOf(minimalRecipe, env).stalenessRecallInFlight).toBe(true);
  });

  it('sets the blackbox adapter only in a recipe with a blackbox section', () => {
    const env = { DRESSAGE_BLACKBOX_TYPE: 'qwen_code' };
    expect(parseRecipe(`${minimalRecipe}blackbox: {}\n`, 'recipe', env).blackbox?.agent).toBe('qwen_code');
    expect(parseRecipe(minimalRecipe, 'recipe', env).blackbox).toBeUndefined();
    expect(
      parseRecipe(`${minimalRecipe}blackbox: { agent: opencode }\n`, 'recipe', env).blackbox?.agent,
    ).toBe('opencode');
  });

  it('loads the reward modules of DRESSAGE_REWARD_MODULES unless the recipe lists its own', () => {
    const env = { DRESSAGE_REWARD_MODULES: './rewards.ts, @scope/rewards#more' };
    expect(parseRecipe(minimalRecipe, 'recipe', env).hooks.reward_modules).toEqual([
      resolve('rewards.ts'),
      '@scope/rewards#more',
    ]);
    const own = `${minimalRecipe}hooks: { reward_modules: [./mine.ts] }\n`;
    expect(parseRecipe(own, 'recipe', env).hooks.reward_modules).toEqual(['./mine.ts']);
  });

  it('names a variable that does not parse, and the key it would set', () => {
    let error: unknown;
    try {
      parseRecipe(minimalRecipe, 'recipe', { DRESSAGE_ROLLOUT_MAX_RETRIES: 'many' });
    } catch (caught) {
      error = caught;
    }
    expect(DressageError.isInstance(error)).toBe(true);
    expect((error as Error).message).toContain('DRESSAGE_ROLLOUT_MAX_RETRIES');
    expect((error as Error).message).toContain('rollout.max_retries');
  });

  it('list only variables the scheduler or recipe reads under the same meaning', () => {
    // Each variable's key is a recipe key: a default set by the schema, then overridden by it.
    for (const entry of recipeEnvironmentVariables) {
      const [section, key] = entry.path as [string, string];
      const value =
        entry.kind === 'integer'
          ? '3'
          : entry.kind === 'boolean'
            ? 'true'
            : entry.kind === 'modules'
              ? '@a/b'
              : 'codex';
      const recipe = parseRecipe(`${minimalRecipe}${section}: {}\n`, 'recipe', { [entry.variable]: value });
      const read = (recipe as unknown as Record<string, Record<string, unknown>>)[section]?.[key];
      expect(String(read)).toBe(value);
      if (entry.kind === 'modules') expect(read).toEqual([value]);
    }
  });
});
