// Every pluggable hook of a recipe, each counting its calls, for the hooks test.
import type { Sample } from '@dressage/protocol';
import { createRolloutScheduler, PromptDataSource } from '@dressage/schedulers';
import { type ConvertOptions, convertSamplesToPackedTrainBatch } from '@dressage/trainer-bridge';

const calls = { dataSource: 0, scheduler: 0, convert: 0, postProcess: 0 };

export function dataSource(context: { recipe: { data: { n_samples_per_prompt: number } } }) {
  calls.dataSource++;
  const records = [1, 2, 3, 4].map((value) => ({
    prompt: `What is ${value} + 1?`,
    label: String(value + 1),
    metadata: { instance_id: `hook-${value}`, reward_fn: 'weather', teacher_id: `teacher ${value % 2}` },
  }));
  return PromptDataSource.fromRecords(records, {
    nSamplesPerPrompt: context.recipe.data.n_samples_per_prompt,
    seed: 1,
  });
}

export const scheduler: typeof createRolloutScheduler = (mode, dependencies, options) => {
  calls.scheduler++;
  return createRolloutScheduler(mode, dependencies, options);
};

export function convert(samples: Sample[], options: ConvertOptions) {
  calls.convert++;
  return convertSamplesToPackedTrainBatch(samples, options);
}

export function postProcess(samples: readonly Sample[]) {
  calls.postProcess++;
  return { rawRewards: samples.map(() => 0), rewards: samples.map((_, index) => (index % 2 === 0 ? -1 : 1)) };
}

export function rolloutLog(_step: number, samples: readonly Sample[]) {
  return {
    'custom/samples': samples.length,
    'custom/data_source_calls': calls.dataSource,
    'custom/scheduler_calls': calls.scheduler,
    'custom/convert_calls': calls.convert,
    'custom/post_process_calls': calls.postProcess,
    'custom/hook_instances': samples.filter((sample) =>
      String(sample.metadata.instance_id).startsWith('hook-'),
    ).length,
  };
}
