import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { rawRewardTrajectoryMean, rolloutLogMetrics } from '@dressage/multi-segment';
import { makeGenerate, type WhiteboxAgentClass } from '@dressage/paddock';
import {
  DressageError,
  type PackedTrainBatch,
  packTrainBatch,
  type Sample,
  type TrainBatch,
} from '@dressage/protocol';
import { ProxyClient } from '@dressage/proxy';
import { computeRewards, RewardRegistry } from '@dressage/reward-registry';
import { createRolloutScheduler, PromptDataSource, type RolloutScheduler } from '@dressage/schedulers';
import { convertSamplesToPackedTrainBatch, type TrainerClient } from '@dressage/trainer-bridge';
import { connectClusterStack } from './cluster-stack.js';
import { type EmbeddedStack, startEmbeddedStack } from './embedded-stack.js';
import { loadHook, loadRunHooks, type RunDataSource } from './hooks.js';
import { MetricsLog, type MetricsRecord, readMetricsLog } from './metrics-log.js';
import { ProgressLine } from './progress.js';
import type { LoadedRecipe, Recipe } from './recipe.js';
import { defaultReportPlots, renderReportHtml } from './report.js';
import { exportSamples } from './sample-export.js';
import type { WarmStartExample } from './warm-start.js';

/** Options of {@link runTraining}. */
export interface RunTrainingOptions {
  /** Continue from the run's last checkpoint and data-source position. */
  resume?: boolean;
  /** Stops the run cleanly after the current step (Ctrl-C). */
  signal?: AbortSignal;
  /** Where progress and summaries go. Default stdout. */
  log?: (line: string) => void;
  /** Overrides `training.steps` (tests). */
  steps?: number;
}

/** What a finished run reports. */
export interface TrainingSummary {
  outputDirectory: string;
  stepsCompleted: number;
  firstReward: number | null;
  lastReward: number | null;
  /** Largest `train_rollout_logprob_abs_diff_max` seen over all RL steps. */
  maxLogprobDiff: number;
  weightVersion: string;
  stopped: boolean;
  reportPath: string;
}

interface RunState {
  /** RL steps completed. */
  step: number;
  weight_version: string;
  checkpoint: string;
}

const stateFile = 'run-state.json';

async function readRunState(directory: string): Promise<RunState | null> {
  const path = join(directory, stateFile);
  if (!existsSync(path)) return null;
  return JSON.parse(await readFile(path, 'utf8')) as RunState;
}

async function writeRunState(directory: string, state: RunState): Promise<void> {
  // Atomic replace: a run killed mid-write keeps the previous state.
  const path = join(directory, stateFile);
  await writeFile(`${path}.tmp`, JSON.stringify(state, null, 2));
  await rename(`${path}.tmp`, path);
}

function mean(values: readonly number[]): number {
  return values.length === 0 ? 0 : values.reduce((sum, value) => sum + value, 0) / values.length;
}

/** Runs the recipe's training end to end: warm-start (optional), then RL steps. */
export async function runTraining(
  loaded: LoadedRecipe,
  options: RunTrainingOptions = {},
): Promise<TrainingSummary> {
  const { recipe } = loaded;
  const log = options.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  const outputDirectory = resolve(recipe.output_dir);
  await mkdir(outputDirectory, { recursive: true });
  const previous = options.resume ? await readRunState(outputDirectory) : null;
  if (options.resume && previous === null) log(`resume: no checkpoint in ${outputDirectory}, starting fresh`);
  const embedded = recipe.engine.kind === 'embedded' && recipe.trainer.kind === 'embedded';
  if (!embedded && (recipe.engine.kind !== 'sglang' || recipe.trainer.kind !== 'grpc')) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${loaded.path}: use an embedded engine with the embedded trainer, or SGLang with a gRPC trainer`,
    });
  }
  const baseDirectory = resolve(loaded.path, '..');
  const hooks = await loadRunHooks(recipe, baseDirectory);
  const agentReference = recipe.agent?.module;
  if (agentReference === undefined && hooks.generate === null) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${loaded.path}: set agent.module (a whitebox agent class) or hooks.generate`,
    });
  }
  const AgentClass =
    agentReference === undefined ? null : await loadHook<WhiteboxAgentClass>(agentReference, baseDirectory);
  const examplesFunction =
    recipe.warm_start.examples === undefined
      ? null
      : await loadHook<(record: Record<string, unknown>) => WarmStartExample[]>(
          recipe.warm_start.examples,
          baseDirectory,
        );

  const registry = new RewardRegistry();
  if (recipe.hooks.reward_modules.length > 0) {
    await registry.loadModules(recipe.hooks.reward_modules, { baseDirectory });
  }

  const dataPath = loaded.resolvePath(recipe.data.path);
  const stack: EmbeddedStack = embedded
    ? await startEmbeddedStack({
        recipe,
        dataPath,
        warmStartExamples: examplesFunction,
        outputDirectory,
        log,
      })
    : await connectClusterStack(loaded, log);
  const started = performance.now();
  let scheduler: RolloutScheduler | null = null;
  const metricsLog = new MetricsLog(join(outputDirectory, 'metrics.jsonl'));
  const progress = new ProgressLine();
  let stopped = false;
  let firstReward: number | null = null;
  let lastReward: number | null = null;
  let maxLogprobDiff = 0;
  let weightVersion = stack.weightVersion;
  let step = previous?.step ?? 0;
  try {
    const trainer = stack.trainer;
    const proxyClient = new ProxyClient({ baseUrl: stack.proxyUrl });
    const dataSource: RunDataSource =
      hooks.dataSource !== null
        ? await hooks.dataSource({ recipe, dataPath })
        : await PromptDataSource.fromJsonl(dataPath, {
            nSamplesPerPrompt: recipe.data.n_samples_per_prompt,
            shuffle: recipe.data.shuffle,
            seed: recipe.seed,
            inputKey: recipe.data.input_key,
            labelKey: recipe.data.label_key,
            metadataKey: recipe.data.metadata_key,
          });

    if (previous !== null) {
      const loadedCheckpoint = await trainer.loadCheckpoint({ path: previous.checkpoint });
      weightVersion = (await publishWeights(trainer, proxyClient, 'resume')).weightVersion;
      await dataSource.load?.(join(outputDirectory, 'data-source'));
      log(
        `resume: step ${previous.step}, checkpoint ${previous.checkpoint} (weights ${loadedCheckpoint.weight_version}), serving ${weightVersion}`,
      );
    }

    // Supervised warm-start through the same TrainerService: a model that sometimes succeeds.
    if (previous === null && recipe.warm_start.steps > 0 && stack.warmStartBatches.length > 0) {
      for (let index = 0; index < recipe.warm_start.steps; index++) {
        if (options.signal?.aborted) break;
        const batch = stack.warmStartBatches[index % stack.warmStartBatches.length] as PackedTrainBatch;
        const response = await trainer.train(batch, {
          rollout_id: index,
          loss: { loss_type: 'sft_loss', learning_rate: recipe.warm_start.learning_rate },
        });
        const metrics = prefixed('warm_start/', response.metrics);
        await metricsLog.append({ step: index, time: seconds(started), phase: 'warm_start', metrics });
        progress.update({ step: index + 1, totalSteps: recipe.warm_start.steps, phase: 'warm_start' });
      }
      weightVersion = (await publishWeights(trainer, proxyClient, 'initial_weight_update')).weightVersion;
      progress.finish();
      log(`warm-start: ${recipe.warm_start.steps} supervised steps, serving weights ${weightVersion}`);
    }

    const totalSteps = options.steps ?? recipe.training.steps;
    const generate =
      hooks.generate ??
      makeGenerate(AgentClass as WhiteboxAgentClass, { proxy: proxyClient, proxyUrl: stack.proxyUrl });
    scheduler = (hooks.rolloutScheduler ?? createRolloutScheduler)(
      recipe.rollout.mode,
      { dataSource, generate, sessionDiscarder: proxyClient },
      {
        rolloutBatchSize: recipe.data.rollout_batch_size,
        nSamplesPerPrompt: recipe.data.n_samples_per_prompt,
        numRollout: totalSteps,
        maxRetries: recipe.rollout.max_retries,
        stalenessKeepVersions: recipe.rollout.keep_versions ?? 0,
        samplingParams: {
          temperature: recipe.rollout.temperature,
          top_p: recipe.rollout.top_p,
          max_new_tokens: recipe.rollout.max_new_tokens,
        },
      },
    );
    const globalBatchSize =
      recipe.training.global_batch_size ?? recipe.data.rollout_batch_size * recipe.data.n_samples_per_prompt;
    let trainerBusySeconds = 0;
    // Trainer idleness is measured over the RL phase only (the warm-start keeps it busy by design).
    const rlStarted = performance.now();

    for (; step < totalSteps; step++) {
      if (options.signal?.aborted) {
        stopped = true;
        break;
      }
      const stepStarted = performance.now();
      const rollout = await scheduler.generateRollout(step, { signal: options.signal });
      const samples = rollout.samples.flat();
      await scoreSamples(samples, registry);
      // What the trainer receives, kept for `dressage inspect` and bug reports.
      await exportSamples(outputDirectory, step, samples);
      const convertOptions = {
        advantageEstimator: recipe.loss.advantage_estimator,
        globalBatchSize,
        ...(hooks.rewardPostProcess === null ? {} : { rewardPostProcess: hooks.rewardPostProcess }),
      };
      const converted = (hooks.convert ?? convertSamplesToPackedTrainBatch)(samples, convertOptions);
      const packed = isPackedBatch(converted) ? converted : packTrainBatch(converted);
      const trainStarted = performance.now();
      const response = await trainer.train(packed, {
        rollout_id: step,
        global_batch_size: globalBatchSize,
        loss: lossConfigOf(recipe),
        expected_weight_version: weightVersion,
      });
      const updated = await publishWeights(trainer, proxyClient, `weight_update_after_rollout_${step}`);
      weightVersion = updated.weightVersion;
      const trainSeconds = (performance.now() - trainStarted) / 1000;
      trainerBusySeconds += trainSeconds;
      const stepSeconds = (performance.now() - stepStarted) / 1000;
      const reward =
        rawRewardTrajectoryMean(samples) ?? mean(samples.map((sample) => Number(sample.reward ?? 0)));
      firstReward ??= reward;
      lastReward = reward;
      const logprobDiffMax = response.metrics.train_rollout_logprob_abs_diff_max ?? 0;
      maxLogprobDiff = Math.max(maxLogprobDiff, logprobDiffMax);
      const logged =
        hooks.rolloutLog === null ? undefined : await hooks.rolloutLog(step, samples, rollout.metrics);
      const rolloutMetrics = logged === true ? {} : { ...rollout.metrics, ...rolloutLogMetrics(samples) };
      const metrics: Record<string, number> = {
        ...rolloutMetrics,
        ...(typeof logged === 'object' ? logged : {}),
        'rollout/raw_reward_trajectory_mean': reward,
        ...prefixed('train/', response.metrics),
        'perf/step_seconds': stepSeconds,
        'perf/train_seconds': trainSeconds,
        'perf/tokens_per_second': packed.tokens.length / stepSeconds,
        'perf/trainer_idle_fraction': Math.max(0, 1 - trainerBusySeconds / seconds(rlStarted)),
      };
      await metricsLog.append({ step, time: seconds(started), phase: 'rl', metrics });
      progress.update({
        step: step + 1,
        totalSteps,
        phase: 'rl',
        reward,
        tokensPerSecond: metrics['perf/tokens_per_second'],
        staleness: metrics['staleness/version_gap_mean'] ?? 0,
        trainerIdleFraction: metrics['perf/trainer_idle_fraction'],
        logprobDiff: response.metrics.train_rollout_logprob_abs_diff,
      });
      if ((step + 1) % recipe.training.checkpoint_interval === 0 || step + 1 === totalSteps) {
        await checkpoint(trainer, dataSource, outputDirectory, step + 1, weightVersion);
      }
    }
    progress.finish();
    if (stopped) {
      await checkpoint(trainer, dataSource, outputDirectory, step, weightVersion);
      log(`stopped at step ${step}; resume with --resume`);
    }
  } finally {
    await scheduler?.shutdown();
    await stack.close();
  }
  const reportPath = await writeReport(outputDirectory, recipe);
  return {
    outputDirectory,
    stepsCompleted: step,
    firstReward,
    lastReward,
    maxLogprobDiff,
    weightVersion,
    stopped,
    reportPath,
  };
}

function isPackedBatch(batch: PackedTrainBatch | TrainBatch): batch is PackedTrainBatch {
  return batch.tokens instanceof Int32Array;
}

function seconds(since: number): number {
  return (performance.now() - since) / 1000;
}

function prefixed(prefix: string, metrics: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(metrics).map(([key, value]) => [`${prefix}${key}`, value]));
}

function lossConfigOf(recipe: Recipe) {
  const loss = recipe.loss;
  return {
    loss_type: 'policy_loss',
    advantage_estimator: loss.advantage_estimator,
    eps_clip: loss.eps_clip,
    ...(loss.eps_clip_high === undefined ? {} : { eps_clip_high: loss.eps_clip_high }),
    ...(loss.eps_clip_c === undefined ? {} : { eps_clip_c: loss.eps_clip_c }),
    use_tis: loss.use_tis,
    tis_clip: loss.tis_clip,
    tis_clip_low: loss.tis_clip_low,
    use_kl_loss: loss.use_kl_loss,
    kl_loss_coef: loss.kl_loss_coef,
    kl_loss_type: loss.kl_loss_type,
    entropy_coef: loss.entropy_coef,
    calculate_per_token_loss: loss.calculate_per_token_loss,
    learning_rate: loss.learning_rate,
  };
}

/** Rewards every anchor whose reward is unset (segments before the anchor already hold 0). */
async function scoreSamples(samples: Sample[], registry: RewardRegistry): Promise<void> {
  const pending = samples.filter((sample) => sample.reward === null && !sample.remove_sample);
  const rewards = await computeRewards(pending, { registry, timeoutMs: 30_000 });
  pending.forEach((sample, index) => {
    sample.reward = rewards[index] as number;
  });
  for (const sample of samples) sample.reward ??= 0;
}

/** Pause the proxy, push the trained weights to the engine, resume (slime's weight-update flow). */
async function publishWeights(
  trainer: TrainerClient,
  proxy: ProxyClient,
  reason: string,
): Promise<{ weightVersion: string }> {
  await proxy.pauseRollout(reason, 300);
  try {
    const response = await trainer.updateWeights({});
    return { weightVersion: response.weight_version };
  } finally {
    await proxy.resumeRollout(undefined, reason);
  }
}

async function checkpoint(
  trainer: TrainerClient,
  dataSource: RunDataSource,
  outputDirectory: string,
  step: number,
  weightVersion: string,
): Promise<void> {
  const path = join(outputDirectory, 'checkpoints', `step-${String(step).padStart(6, '0')}`);
  await trainer.saveCheckpoint({ path, rollout_id: step });
  await dataSource.save?.(join(outputDirectory, 'data-source'), step);
  await writeRunState(outputDirectory, {
    step,
    weight_version: weightVersion,
    checkpoint: path,
  });
}

/** Writes `report.html` from the run's metrics log; returns its path. */
export async function writeReport(outputDirectory: string, recipe: Pick<Recipe, 'name'>): Promise<string> {
  const records: MetricsRecord[] = existsSync(join(outputDirectory, 'metrics.jsonl'))
    ? await readMetricsLog(join(outputDirectory, 'metrics.jsonl'))
    : [];
  const rl = records.filter((record) => record.phase === 'rl');
  const rewards = rl
    .map((record) => record.metrics['rollout/raw_reward_trajectory_mean'])
    .filter(Number.isFinite);
  const diffs = rl.map((record) => record.metrics['train/train_rollout_logprob_abs_diff_max'] ?? 0);
  const html = renderReportHtml(
    {
      name: recipe.name,
      generatedAt: new Date().toISOString(),
      facts: {
        'RL steps': rl.length,
        'warm-start steps': records.length - rl.length,
        'first reward': rewards.length > 0 ? Number((rewards[0] as number).toFixed(4)) : 'n/a',
        'last reward': rewards.length > 0 ? Number((rewards.at(-1) as number).toFixed(4)) : 'n/a',
        'max |trainer − rollout logprob|': diffs.length > 0 ? Math.max(...diffs).toExponential(2) : 'n/a',
      },
    },
    rl,
    defaultReportPlots,
  );
  const path = join(outputDirectory, 'report.html');
  await writeFile(path, html);
  return path;
}
