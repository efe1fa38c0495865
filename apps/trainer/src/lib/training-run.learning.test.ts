// The end-to-end learning check, and what makes shipping the weather recipe's warm-start honest.
// It trains the recipe's 500-step warm-start again exactly as `dressage warm-start` does and checks
// that the result is the file shipped in recipes/weather/warm-start byte for byte (a change to the
// model, the trainer or the data that changes the warm-start fails here until the file is written
// anew). Every run below then starts from the regenerated file, not the shipped one: the demo as
// `pnpm start` runs it (sync, TITO, 50 RL steps), fully-async for 40 steps and snapshot mode for 32.
// The reward must rise because RL teaches the warm-started model to call its tool. It takes several
// minutes of CPU; the warm-start dominates, and every run shares it through the warm-start cache
// (snapshot mode renders the same template as TITO, so its batches are the same token for token).
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MetricsRecord, readMetricsLog } from './metrics-log.js';
import { Progress } from './progress.js';
import { loadRecipe } from './recipe.js';
import { runTraining, type TrainingSummary } from './training-run.js';

const here = dirname(fileURLToPath(import.meta.url));
const recipes = join(here, '..', '..', 'recipes', 'weather');

function mean(values: readonly number[]): number {
  return values.reduce((sum, value) => sum + value, 0) / values.length;
}

const regenerate = 'pnpm dressage warm-start --recipe apps/trainer/recipes/weather/recipe.yaml';
// Progress goes nowhere: the figures are asserted, not read.
const quiet = () => new Progress({ stream: { write: () => true }, live: false });

let directory: string;
let regenerated: TrainingSummary;
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'dressage-learning-'));
  const loaded = await loadRecipe(join(recipes, 'recipe.yaml'));
  loaded.recipe.output_dir = join(directory, 'warm-start-run');
  loaded.recipe.warm_start.cache_dir = join(directory, 'warm-start');
  // What `dressage warm-start --recipe recipe.yaml` runs.
  regenerated = await runTraining(loaded, {
    warmStartOnly: true,
    freshWarmStart: true,
    log: () => undefined,
    progress: quiet(),
  });
}, 3_600_000);
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
  // Every run starts from the regenerated warm-start (a miss would train it again: asserted below).
  loaded.recipe.warm_start.cache_dir = join(directory, 'warm-start');
  loaded.recipe.training.steps = steps;
  loaded.recipe.training.checkpoint_interval = 100;
  const summary = await runTraining(loaded, { log: () => undefined, progress: quiet() });
  expect(summary.warmStart).toMatchObject({ source: 'cached', path: regenerated.warmStart.path });
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

describe('the shipped weather warm-start', () => {
  it('is what the recipe regenerates, byte for byte', async () => {
    expect(regenerated.warmStart.source).toBe('trained');
    expect(regenerated.stepsCompleted).toBe(0);
    const entry = regenerated.warmStart.path as string;
    const name = basename(entry);
    const shipped = join(recipes, 'warm-start');
    const shippedEntries = (await readdir(shipped)).filter((file) => file.startsWith('warm-start-'));
    // One entry, under the key of the recipe as it is: a stale one would never be read.
    expect(shippedEntries, `the shipped warm-start is stale: run ${regenerate}`).toEqual([name]);
    const files = (await readdir(entry)).sort();
    expect((await readdir(join(shipped, name))).sort()).toEqual(files);
    for (const file of files) {
      const [ours, theirs] = await Promise.all([
        readFile(join(entry, file)),
        readFile(join(shipped, name, file)),
      ]);
      expect(ours.equals(theirs), `${file} differs from the shipped one: run ${regenerate}`).toBe(true);
    }
  });
});

describe('the shipped weather recipe', () => {
  it('is the demo: from the regenerated warm-start, the reward rises as the README says', async () => {
    // `pnpm start` as shipped: sync, TITO, 50 steps. Measured: 10-step means 0.42 0.92 0.96 0.96
    // 0.94 (last ten 0.94) on a loaded machine; the README's claim is a last-ten mean of at least
    // 0.9. Rollouts reach the engine in varying order, so CI allows a little below it.
    const { summary, rl } = await train('recipe.yaml', 'sync', 'tito', 50);
    expect(summary.stepsCompleted).toBe(50);
    // The bar of every parity check: the largest difference over a whole run has been a few 1e-6,
    // once 1.2e-5 (a CI run); a trainer scoring with other weights is off by 1e-3 and more.
    expect(summary.maxLogprobDiff).toBeLessThanOrEqual(1e-4);
    expect(summary.meanVersionGap).toBe(0);
    expectLearned(rl);
    expect(mean(summary.rewards.slice(-10))).toBeGreaterThanOrEqual(0.85);
  }, 1_800_000);

  it('learns as well in fully-async mode, losing no request to preemption', async () => {
    // Fully-async learns from feedback one update late and rises later than sync with the Qwen3
    // template, hence 40 steps. The shipped variant takes the rollout logprobs as PPO's old policy
    // (loss.use_rollout_logprobs), Dr. GRPO advantages and the recipe's gradient-spike clip.
    // Without the clip, one gradient spike from a rare failure (norm 40x the usual) collapsed runs
    // for good (every later step at 0); the README's table records every run with it.
    const { summary, rl } = await train('fully-async.yaml', 'fully-async', 'tito', 40);
    expect(summary.stepsCompleted).toBe(40);
    // No collapse: once learned, no step falls below half (the README's robustness criterion).
    expect(Math.min(...summary.rewards.slice(20))).toBeGreaterThanOrEqual(0.5);
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
