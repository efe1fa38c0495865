// The shipped weather recipe, shortened to a 300-step warm-start and its first 32 RL steps in sync
// and snapshot mode and its first 40 in fully-async mode: the reward must rise because RL teaches
// the warm-started model to call its tool. This is the end-to-end learning check; it takes a few
// minutes of CPU (the warm-start dominates, and the runs share it through the warm-start cache:
// snapshot mode renders the same template as TITO, so its warm-start batches are the same token for
// token). With the recipe's eight heads, 300 warm-start steps already repeat the tool's word 0.94-0.98
// of the time on seeds 7, 11 and 13 (500, the recipe's, 0.98-1.00), and 200 steps less keep CI short.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MetricsRecord, readMetricsLog } from './metrics-log.js';
import { loadRecipe } from './recipe.js';
import { runTraining, type TrainingSummary } from './training-run.js';

const here = dirname(fileURLToPath(import.meta.url));
const recipes = join(here, '..', '..', 'recipes', 'weather');

function mean(values: readonly number[]): number {
  return values.reduce((sum, value) => sum + value, 0) / values.length;
}

let directory: string;
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'dressage-learning-'));
});
afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

async function train(
  recipeFile: string,
  name: string,
  tokenBuildMode: 'tito' | 'snapshot' = 'tito',
  steps = 24,
): Promise<{ summary: TrainingSummary; rl: MetricsRecord[] }> {
  const loaded = await loadRecipe(join(recipes, recipeFile));
  loaded.recipe.output_dir = join(directory, name);
  loaded.recipe.proxy.token_build_mode = tokenBuildMode;
  // The two runs share one warm-start; DRESSAGE_WARM_START_CACHE keeps it across test runs (the
  // cache key covers everything the warm-start depends on, so a stale entry is never read).
  loaded.recipe.warm_start.cache_dir = process.env.DRESSAGE_WARM_START_CACHE ?? join(directory, 'warm-start');
  loaded.recipe.warm_start.steps = 300;
  loaded.recipe.training.steps = steps;
  loaded.recipe.training.checkpoint_interval = 100;
  const summary = await runTraining(loaded, { log: () => undefined });
  const rl = (await readMetricsLog(join(directory, name, 'metrics.jsonl'))).filter(
    (record) => record.phase === 'rl',
  );
  // Where the time went, for comparing the modes on the same machine (not asserted: timings vary).
  const average = (name: string) => mean(rl.map((record) => record.metrics[name] ?? 0));
  console.info(
    `${name}: rewards ${rl.map((record) => record.metrics['rollout/raw_reward_trajectory_mean']!.toFixed(2)).join(' ')}; ` +
      `step ${average('perf/step_seconds').toFixed(2)} s = rollout wait ${average('perf/rollout_wait_seconds').toFixed(2)} + ` +
      `train ${average('perf/train_seconds').toFixed(2)} + publish ${average('perf/publish_seconds').toFixed(2)}; ` +
      `trainer idle ${((rl.at(-1)?.metrics['perf/trainer_idle_fraction'] ?? 0) * 100).toFixed(0)}%; ` +
      `version gap ${summary.meanVersionGap.toFixed(2)}`,
  );
  return { summary, rl };
}

// The reward rises, and the rise comes from calling the tool: two segments per trajectory
// instead of one. Measured: about 0.12 → 0.88 over these steps (runs differ: concurrent rollouts
// reach the engine in varying order). The margins leave room for that and for sampling noise (32
// trajectories a step).
function expectLearned(rl: readonly MetricsRecord[]): void {
  const rewards = rl.map((record) => record.metrics['rollout/raw_reward_trajectory_mean']!);
  const segments = rl.map((record) => record.metrics['rollout/segments_per_trajectory_mean']!);
  const first = mean(rewards.slice(0, 3));
  const last = mean(rewards.slice(-3));
  expect(first).toBeLessThan(0.4);
  expect(last).toBeGreaterThan(0.55);
  expect(last - first).toBeGreaterThan(0.3);
  const firstSegments = mean(segments.slice(0, 3));
  const lastSegments = mean(segments.slice(-3));
  expect(firstSegments).toBeLessThan(1.4);
  expect(lastSegments).toBeGreaterThan(1.5);
  expect(lastSegments - firstSegments).toBeGreaterThan(0.3);
}

describe('the shipped weather recipe', () => {
  it('raises the reward in its first RL steps, with logprob parity, as tool use grows', async () => {
    // At the recipe's own learning rate (1e-3): 3e-3 rises twice as fast but can collapse right
    // after it saturates (one CI run fell from 0.94 to 0 at step 15), which is why the recipe
    // ships 1e-3. With the Qwen3 template the rise comes later (two runs: 0.58 and 0.68 over steps
    // 22-24), hence 32 steps.
    const { summary, rl } = await train('recipe.yaml', 'sync', 'tito', 32);
    expect(summary.stepsCompleted).toBe(32);
    expect(summary.maxLogprobDiff).toBeLessThanOrEqual(1e-4);
    expect(summary.meanVersionGap).toBe(0);
    expectLearned(rl);
  }, 1_200_000);

  it('learns as well in fully-async mode, losing no request to preemption', async () => {
    // Fully-async learns from feedback one update late and rises later than sync with the Qwen3
    // template, hence 40 steps. The shipped variant takes the rollout logprobs as PPO's old policy
    // (loss.use_rollout_logprobs) and Dr. GRPO advantages. Measured from the 500-step warm-start,
    // seeds 7, 13 and 17: mean reward over steps 38-40 from 0.80 to 0.99 (seed 7: one step at 0.44).
    // (With std-divided advantages one run scored 0 at steps 28-38; with truncated importance
    // sampling instead, one run ended 0.19, 0.94, 0.34 over steps 38-40.)
    const { summary, rl } = await train('fully-async.yaml', 'fully-async', 'tito', 40);
    expect(summary.stepsCompleted).toBe(40);
    // Rollouts overlap training: most trained tokens come from the weights before the trainer's.
    expect(summary.meanVersionGap).toBeGreaterThan(0.3);
    // Parity holds on the tokens of the trainer's own weights; older tokens are the off-policy gap.
    expect(summary.maxLogprobDiff).toBeLessThanOrEqual(1e-4);
    expect(summary.maxOffPolicyLogprobDiff).toBeGreaterThan(1e-4);
    // Weight updates preempt requests in flight: they continue on the new weights, none fails.
    const failed = rl.map((record) => record.metrics['dressage/fully_async_failed_groups'] ?? 0);
    expect(failed.every((count) => count === 0)).toBe(true);
    // Some trajectory carries tokens of two versions (a preempted request continued on the new
    // weights); one that ran across two updates carries three, which keep_versions allows (like the
    // reference, it judges a group by where its trajectories ended).
    expect(
      Math.max(...rl.map((record) => record.metrics['staleness/version_span_max'] ?? 0)),
    ).toBeGreaterThanOrEqual(2);
    expectLearned(rl);
  }, 1_200_000);

  it('learns in snapshot mode too: warm-start, snapshot and TITO render one template', async () => {
    // Snapshot mode re-renders every prompt with the template in force, the text the warm-start
    // was rendered with. (When the warm-start rendered another format than snapshot mode, no call
    // of the warm-started model parsed and every step scored 0.) It rises a few steps later than
    // TITO mode (measured: 0.14 → 0.53 by step 24, 0.21 → 0.81 by step 32), hence 32 steps.
    const { summary, rl } = await train('recipe.yaml', 'snapshot', 'snapshot', 32);
    expect(summary.stepsCompleted).toBe(32);
    expect(summary.maxLogprobDiff).toBeLessThanOrEqual(1e-4);
    expectLearned(rl);
  }, 1_200_000);
});
