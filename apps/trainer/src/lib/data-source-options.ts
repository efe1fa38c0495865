import type { PromptDataSourceOptions } from '@dressage/schedulers';
import type { Recipe } from './recipe.js';

/** What the prompt data source takes from the recipe's `data` section and `seed`. */
export function dataSourceOptionsOf(recipe: Recipe): PromptDataSourceOptions {
  return {
    nSamplesPerPrompt: recipe.data.n_samples_per_prompt,
    shuffle: recipe.data.shuffle,
    seed: recipe.seed,
    inputKey: recipe.data.input_key,
    labelKey: recipe.data.label_key,
    metadataKey: recipe.data.metadata_key,
  };
}
