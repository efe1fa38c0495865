// The RL phase of a run: one step after another, each with its metrics line and progress.
import { rawRewardTrajectoryMean, rolloutLogMetrics } from '@dressage/multi-segment';
import { DressageError } from '@dressage/protocol';
import type { ProxyClient } from '@dressage/proxy';
import type { RolloutScheduler } from '@dressage/schedulers';
import { CollapseAlarm, groupTrajectoryRewards } from './collapse-alarm.js';
import { formatDuration, sparkline } from './progress.js';
import { type RunAgents, startAgents } from './run-agents.js';
import { checkpoint } from './run-checkpoint.js';
import type { RunContext } from './run-context.js';
import { mean, prefixed, seconds } from './run-figures.js';
import { checkpointsAfterStep, reportsAfterStep } from './run-plan.js';
import { writeReport } from './run-report.js';
import { createRunScheduler } from './scheduler-options.js';
import type { tokenVersionStatistics } from './token-versions.js';
import { type TrainedStep, trainStep } from './train-step.js';

/** The RL phase's running figures, as the summary and the metrics report them. */
export class RlTotals {
  readonly rewards: number[] = [];
  firstReward: number | null = null;
  lastReward: number | null = null;
  maxLogprobDiff = 0;
  maxOffPolicyLogprobDiff = 0;
  readonly gapMeans: number[] = [];
  trainerBusySeconds = 0;
  rolloutWaitSeconds = 0;
  /** `performance.now()` when the RL phase began: trainer idleness is measured over it only. */
  started = performance.now();

  /** Marks the start of the RL phase (the warm-start keeps the trainer busy by design). */
  begin(): void {
    this.started = performance.now();
  }

  /** Counts one step's mean reward and token figures. */
  observe(reward: number, tokens: ReturnType<typeof tokenVersionStatistics>): void {
    this.firstReward ??= reward;
    this.lastReward = reward;
    this.rewards.push(reward);
    this.maxLogprobDiff = Math.max(this.maxLogprobDiff, tokens.parityMax ?? 0);
    this.maxOffPolicyLogprobDiff = Math.max(
      this.maxOffPolicyLogprobDiff,
      tokens.metrics['offpolicy/logprob_abs_diff_max'] ?? 0,
    );
    if (tokens.gapMean !== null) this.gapMeans.push(tokens.gapMean);
  }
}

/** The step's timings besides those of the train call. */
interface StepTimes {
  stepSeconds: number;
  waitSeconds: number;
}

/**
 * One step's metrics line: the rollout's, the trainer's, the token versions', timings, the weight
 * update, the collapse alarm and the proxy's preemption counters.
 */
async function stepMetrics(
  run: RunContext,
  trained: TrainedStep,
  rollout: Awaited<ReturnType<RolloutScheduler['generateRollout']>>,
  reward: number,
  reading: ReturnType<CollapseAlarm['observe']>,
  times: StepTimes,
  totals: RlTotals,
): Promise<Record<string, number>> {
  const { hooks } = run.setup;
  const { samples, packed, response, tokens, published } = trained;
  const logged =
    hooks.rolloutLog === null ? undefined : await hooks.rolloutLog(run.step, samples, rollout.metrics);
  const rolloutMetrics = logged === true ? {} : { ...rollout.metrics, ...rolloutLogMetrics(samples) };
  // The proxy's preemption counters (since it started): those it did not request are the
  // engines' own aborts, e.g. slime pausing them around its weight update.
  const pauseState = await run.proxyClient.pauseState().catch(() => null);
  const preemptions: Record<string, number> = {};
  if (typeof pauseState?.preempted_chunks === 'number')
    preemptions['proxy/preempted_chunks'] = pauseState.preempted_chunks;
  if (typeof pauseState?.unrequested_preemptions === 'number')
    preemptions['proxy/unrequested_preemptions'] = pauseState.unrequested_preemptions;
  return {
    ...rolloutMetrics,
    ...(typeof logged === 'object' ? logged : {}),
    'rollout/raw_reward_trajectory_mean': reward,
    ...prefixed('train/', response.metrics),
    ...tokens.metrics,
    'perf/step_seconds': times.stepSeconds,
    'perf/rollout_wait_seconds': times.waitSeconds,
    'perf/rollout_wait_fraction': totals.rolloutWaitSeconds / seconds(totals.started),
    'perf/train_seconds': trained.trainedSeconds,
    'perf/publish_seconds': trained.trainSeconds - trained.trainedSeconds,
    // 1 when the rollouts were paused (and quiesced) before the weights moved.
    'weight_update/published': published === null ? 0 : 1,
    'weight_update/paused': published?.paused === true ? 1 : 0,
    'weight_update/quiesced': published?.quiesced === true ? 1 : 0,
    'perf/tokens_per_second': packed.tokens.length / times.stepSeconds,
    'perf/trainer_idle_fraction': Math.max(0, 1 - totals.trainerBusySeconds / seconds(totals.started)),
    ...reading.metrics,
    ...preemptions,
  };
}

/**
 * One RL step: a rollout from the scheduler, training on it, its metrics line, progress, and a
 * checkpoint when one is due.
 */
async function rlStep(
  run: RunContext,
  scheduler: RolloutScheduler,
  alarm: CollapseAlarm,
  totals: RlTotals,
): Promise<void> {
  const { recipe, options, step } = run;
  const totalSteps = run.plan.totalSteps;
  const stepStarted = performance.now();
  const rollout = await scheduler.generateRollout(step, {
    signal: options.signal,
    weightVersion: run.weightVersion,
  });
  const waitSeconds = (performance.now() - stepStarted) / 1000;
  totals.rolloutWaitSeconds += waitSeconds;
  const trained = await trainStep(run, step, rollout.samples.flat());
  const { samples, tokens } = trained;
  totals.trainerBusySeconds += trained.trainSeconds;
  const stepSeconds = (performance.now() - stepStarted) / 1000;
  const reward =
    rawRewardTrajectoryMean(samples) ?? mean(samples.map((sample) => Number(sample.reward ?? 0)));
  totals.observe(reward, tokens);
  const reading = alarm.observe(
    trained.response.metrics.grad_norm,
    groupTrajectoryRewards(rollout.samples),
    reward,
  );
  const metrics = await stepMetrics(
    run,
    trained,
    rollout,
    reward,
    reading,
    { stepSeconds, waitSeconds },
    totals,
  );
  await run.metricsLog.append({ step, time: seconds(run.started), phase: 'rl', metrics });
  if (reportsAfterStep(recipe, step)) await writeReport(run.plan.outputDirectory, recipe);
  run.progress.update({
    step: step + 1,
    totalSteps,
    phase: 'rl',
    reward,
    tokensPerSecond: metrics['perf/tokens_per_second'],
    ...(tokens.gapMean === null ? {} : { versionGap: tokens.gapMean }),
    ...gapShares(metrics),
    trainerIdleFraction: metrics['perf/trainer_idle_fraction'],
    ...optionalNumber('logprobDiff', metrics['parity/logprob_abs_diff']),
    ...optionalNumber('offPolicyLogprobDiff', metrics['offpolicy/logprob_abs_diff']),
    ...(reading.reason === undefined ? {} : { alarm: reading.reason }),
  });
  if (checkpointsAfterStep(recipe, step, totalSteps)) {
    await checkpoint(
      run.stack.trainer,
      run.stack,
      run.dataSource,
      run.plan.outputDirectory,
      step + 1,
      run.weightVersion,
    );
  }
}

/** How the RL phase ended. */
export interface RlOutcome {
  /** True when the run was stopped (Ctrl-C) before its last step. */
  stopped: boolean;
  seconds: number;
}

/**
 * The RL phase: the agents and the scheduler start, one step runs after another, and a stopped run
 * leaves a checkpoint to resume from. The scheduler and the agents are closed however it ends.
 */
export async function runRlPhase(run: RunContext, totals: RlTotals): Promise<RlOutcome> {
  const { recipe, plan, proxyClient, options } = run;
  let scheduler: RolloutScheduler | null = null;
  let agents: RunAgents | null = null;
  try {
    if (recipe.rollout.mode !== 'sync') await refuseFailingPreemption(proxyClient, recipe.rollout.mode);
    agents = await startAgents(run, () => run.step);
    scheduler = createRunScheduler(
      recipe,
      { dataSource: run.dataSource, generate: agents.generate, sessionDiscarder: proxyClient },
      plan.totalSteps,
      run.setup.hooks.rolloutScheduler,
    );
    run.progress.begin('rl', run.step);
    const alarm = new CollapseAlarm();
    totals.begin();
    let stopped = false;
    for (; run.step < plan.totalSteps; run.step++) {
      if (options.signal?.aborted) {
        stopped = true;
        break;
      }
      await rlStep(run, scheduler, alarm, totals);
    }
    const rlSeconds = seconds(totals.started);
    if (totals.rewards.length > 0) run.progress.endPhase(rlSummary(totals.rewards, rlSeconds));
    if (stopped) {
      await checkpoint(
        run.stack.trainer,
        run.stack,
        run.dataSource,
        plan.outputDirectory,
        run.step,
        run.weightVersion,
      );
      run.log(`stopped at step ${run.step}; resume with --resume`);
    }
    return { stopped, seconds: rlSeconds };
  } finally {
    await scheduler?.shutdown();
    await agents?.blackbox?.close();
    await agents?.sandboxes?.close();
  }
}

/** `RL: 50 steps in 2:05; reward (10-step means) 0.39 0.84 0.97 0.96 0.96`. */
function rlSummary(rewards: readonly number[], rlSeconds: number): string {
  const means: string[] = [];
  for (let start = 0; start < rewards.length; start += 10)
    means.push(mean(rewards.slice(start, start + 10)).toFixed(2));
  return `RL: ${rewards.length} step${rewards.length === 1 ? '' : 's'} in ${formatDuration(rlSeconds)}; reward ${sparkline(rewards)} (10-step means ${means.join(' ')})`;
}

function optionalNumber<K extends string>(key: K, value: number | undefined): { [P in K]?: number } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: number };
}

/** Shares of trained tokens 0, 1 and 2+ versions behind, for the progress line. */
function gapShares(metrics: Record<string, number>): { gapShares?: [number, number, number] } {
  const current = metrics['version_gap/tokens_0'];
  if (current === undefined) return {};
  const behind = metrics['version_gap/tokens_1'] ?? 0;
  return { gapShares: [current, behind, Math.max(0, 1 - current - behind)] };
}

/**
 * An async mode keeps requests in flight while weights are published: a proxy that fails preempted
 * requests instead of continuing them would lose part of every batch. Asked of the proxy itself, so
 * a proxy started elsewhere (`proxy.url`) is checked too.
 */
async function refuseFailingPreemption(proxy: ProxyClient, mode: string): Promise<void> {
  const state = await proxy.pauseState();
  if (state.partial_rollout === false) {
    throw new DressageError({
      code: 'failed_precondition',
      message:
        `rollout.mode ${mode} needs a proxy that continues preempted requests (partial rollout): this ` +
        'proxy fails them with 502 generation_preempted at every weight update, losing them from the ' +
        'batch. Start it with --dressage-partial-rollout, or use mode sync',
    });
  }
}
