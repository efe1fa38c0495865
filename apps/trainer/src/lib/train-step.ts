// One RL step's training: rewards, the exported samples, the train call and the weight update.
import { type PackedTrainBatch, packTrainBatch, type Sample, type TrainBatch } from '@dressage/protocol';
import { computeRewards, type RewardRegistry } from '@dressage/reward-registry';
import {
  convertSamplesToPackedTrainBatch,
  type TrainerClient,
  truncateSample,
} from '@dressage/trainer-bridge';
import { conversionOptionsOf } from './conversion-options.js';
import { lossConfigOf } from './loss-config.js';
import type { Recipe } from './recipe.js';
import { publish, type RunContext } from './run-context.js';
import { publishesAfterStep } from './run-plan.js';
import { exportSamples, exportTrainLogProbs } from './sample-export.js';
import { tokenVersionStatistics } from './token-versions.js';
import type { PublishedWeights } from './weight-publish.js';

/** What one RL step trained on and what its training answered. */
export interface TrainedStep {
  samples: Sample[];
  packed: PackedTrainBatch;
  response: Awaited<ReturnType<TrainerClient['train']>>;
  tokens: ReturnType<typeof tokenVersionStatistics>;
  published: PublishedWeights | null;
  /** Seconds of the train call alone, and with the weight publication after it. */
  trainedSeconds: number;
  trainSeconds: number;
}

/**
 * Scores a rollout's samples, exports them, trains on them and publishes the weights when the
 * recipe's update interval says so.
 */
export async function trainStep(run: RunContext, step: number, samples: Sample[]): Promise<TrainedStep> {
  const { recipe, stack, errorLog } = run;
  const { hooks, registry, rewardArgs } = run.setup;
  const outputDirectory = run.plan.outputDirectory;
  await scoreSamples(samples, registry, rewardArgs).catch(async (error: unknown) => {
    await errorLog.recordRewardFailure(error, samples, step);
    throw error;
  });
  // What the trainer receives, kept for `dressage inspect` and bug reports: cut to
  // `training.max_sequence_length` as the conversion cuts them.
  const maxSequenceLength = recipe.training.max_sequence_length;
  await exportSamples(
    outputDirectory,
    step,
    maxSequenceLength === undefined
      ? samples
      : samples.map((sample) => truncateSample(sample, maxSequenceLength)),
  );
  const globalBatchSize = globalBatchSizeOf(recipe);
  const convertOptions = conversionOptionsOf(recipe, globalBatchSize, hooks.rewardPostProcess);
  const converted = (hooks.convert ?? convertSamplesToPackedTrainBatch)(samples, convertOptions);
  const packed = isPackedBatch(converted) ? converted : packTrainBatch(converted);
  const trainStarted = performance.now();
  const trainerVersion = run.weightVersion;
  const response = await stack.trainer.train(packed, {
    rollout_id: step,
    global_batch_size: globalBatchSize,
    loss: lossConfigOf(recipe),
    expected_weight_version: trainerVersion,
  });
  const trainedSeconds = (performance.now() - trainStarted) / 1000;
  const trainLogProbs = stack.takeTrainLogProbs?.() ?? null;
  const tokens = tokenVersionStatistics({
    samples,
    batch: packed,
    history: run.history,
    trainerVersion,
    trainLogProbs,
    trainerParity: {
      mean: response.metrics.train_rollout_logprob_abs_diff ?? 0,
      max: response.metrics.train_rollout_logprob_abs_diff_max ?? 0,
    },
  });
  if (trainLogProbs !== null) await exportTrainLogProbs(outputDirectory, step, packed, trainLogProbs);
  // Weights reach the engine after every `update_weights_interval`-th step only.
  const published = publishesAfterStep(recipe, step)
    ? await publish(run, `weight_update_after_rollout_${step}`)
    : null;
  const trainSeconds = (performance.now() - trainStarted) / 1000;
  return { samples, packed, response, tokens, published, trainedSeconds, trainSeconds };
}

function globalBatchSizeOf(recipe: Recipe): number {
  return (
    recipe.training.global_batch_size ?? recipe.data.rollout_batch_size * recipe.data.n_samples_per_prompt
  );
}

function isPackedBatch(batch: PackedTrainBatch | TrainBatch): batch is PackedTrainBatch {
  return batch.tokens instanceof Int32Array;
}

/** Rewards every anchor whose reward is unset (segments before the anchor already hold 0). */
async function scoreSamples(
  samples: Sample[],
  registry: RewardRegistry,
  args: Readonly<Record<string, unknown>>,
): Promise<void> {
  const pending = samples.filter((sample) => sample.reward === null && !sample.remove_sample);
  const rewards = await computeRewards(pending, { registry, timeoutMs: 30_000, args });
  pending.forEach((sample, index) => {
    sample.reward = rewards[index] as number;
  });
  for (const sample of samples) sample.reward ??= 0;
}
