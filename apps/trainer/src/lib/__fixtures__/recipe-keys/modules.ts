// Every module a recipe can name, for the recipe-key table: each export is told apart by its name.
import { WhiteboxAgent } from '@dressage/paddock';
import type { Sample } from '@dressage/protocol';
import { createRolloutScheduler, PromptDataSource } from '@dressage/schedulers';
import { type ConvertOptions, convertSamplesToPackedTrainBatch } from '@dressage/trainer-bridge';

export class KeyAgent extends WhiteboxAgent {
  async run(): Promise<string> {
    return '';
  }
}

export function examples(): never[] {
  return [];
}

export function keyGenerate(sample: Sample): Sample {
  return sample;
}

export function keyDataSource() {
  return PromptDataSource.fromRecords([{ prompt: 'p', label: 'l' }], { nSamplesPerPrompt: 1, seed: 1 });
}

export const keyScheduler: typeof createRolloutScheduler = (mode, dependencies, options) =>
  createRolloutScheduler(mode, dependencies, options);

export function keyConvert(samples: Sample[], options: ConvertOptions) {
  return convertSamplesToPackedTrainBatch(samples, options);
}

export function keyPostProcess(samples: readonly Sample[]) {
  return { rawRewards: samples.map(() => 0), rewards: samples.map(() => 0) };
}

export function keyRolloutLog() {
  return {};
}

export const rewards = {
  key_reward(): number {
    return 1;
  },
};
