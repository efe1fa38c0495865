// Where the demo's time goes (`pnpm start`: the weather recipe, sync, 50 RL steps), phase by phase:
// starting the stack (engine, proxy, trainer), the warm-start, and RL. The demo starts RL from the
// shipped warm-start; the baseline, measured in the same run, is the warm-start trained live as
// `--fresh-warm-start` does: a few of its steps are timed and the recipe's step count projected from
// their median (labelled as a projection). Headline: the demo's training wall time (what a newcomer
// waits for after the build), and how many times longer it would be with the warm-start trained live.
// Install and build are outside this bench (see docs/performance.md for a fresh clone's figures).
// Flags: --steps N (RL steps, default the recipe's), --sample N (live warm-start steps timed, default 20).
// The last output line is one JSON object of headline figures.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { readMetricsLog } from '../src/lib/metrics-log.js';
import { Progress } from '../src/lib/progress.js';
import { loadRecipe } from '../src/lib/recipe.js';
import { runTraining } from '../src/lib/training-run.js';

const { values } = parseArgs({
  options: { steps: { type: 'string' }, sample: { type: 'string', default: '20' } },
});
const recipePath = new URL('../recipes/weather/recipe.yaml', import.meta.url).pathname;
const directory = await mkdtemp(join(tmpdir(), 'dressage-demo-bench-'));
const quiet = new Progress({ stream: { write: () => true }, live: false });

function median(values: number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;
}

try {
  // The demo as `pnpm start` runs it, from the shipped warm-start.
  const demo = await loadRecipe(recipePath);
  demo.recipe.output_dir = join(directory, 'demo');
  const started = performance.now();
  const summary = await runTraining(demo, {
    log: () => undefined,
    progress: quiet,
    ...(values.steps === undefined ? {} : { steps: Number(values.steps) }),
  });
  const total = (performance.now() - started) / 1000;
  if (summary.warmStart.source !== 'cached')
    throw new Error(`the demo did not start from the shipped warm-start (${summary.warmStart.source})`);
  const stack = total - summary.warmStart.seconds - summary.rlSeconds;
  const lastTen = summary.rewards.slice(-10);
  const lastTenMean = lastTen.reduce((sum, value) => sum + value, 0) / lastTen.length;

  // The baseline: the same warm-start trained live, a sample of its steps timed.
  const live = await loadRecipe(recipePath);
  live.recipe.output_dir = join(directory, 'live');
  live.recipe.warm_start.cache_dir = null;
  const sampleSteps = Number(values.sample);
  const recipeSteps = live.recipe.warm_start.steps;
  live.recipe.warm_start.steps = sampleSteps;
  await runTraining(live, { warmStartOnly: true, log: () => undefined, progress: quiet });
  const records = await readMetricsLog(join(directory, 'live', 'metrics.jsonl'));
  const stepSeconds = records
    .slice(1)
    .map((record, index) => record.time - (records[index] as { time: number }).time);
  const liveStep = median(stepSeconds);
  const projectedWarmStart = liveStep * recipeSteps;

  console.log(
    `demo phases (measured): stack ${stack.toFixed(1)} s, warm-start load ${summary.warmStart.seconds.toFixed(2)} s, RL ${summary.rlSeconds.toFixed(1)} s (${summary.rewards.length} steps, ${(summary.rlSeconds / summary.rewards.length).toFixed(2)} s/step); training wall ${total.toFixed(1)} s`,
  );
  console.log(
    `demo reward: last ten ${lastTenMean.toFixed(3)}; max |trainer - rollout logprob| on-policy ${summary.maxLogprobDiff.toExponential(2)}`,
  );
  console.log(
    `baseline, warm-start trained live: ${liveStep.toFixed(3)} s/step (median of ${stepSeconds.length}) x ${recipeSteps} steps = ${projectedWarmStart.toFixed(0)} s (projection)`,
  );
  console.log(
    `training wall with the live warm-start / with the shipped one: ${((total - summary.warmStart.seconds + projectedWarmStart) / total).toFixed(2)}x (projection)`,
  );
  console.log(
    JSON.stringify({
      bench: 'demo',
      demo_training_seconds: Number(total.toFixed(1)),
      stack_seconds: Number(stack.toFixed(1)),
      warm_start_load_seconds: Number(summary.warmStart.seconds.toFixed(2)),
      rl_seconds: Number(summary.rlSeconds.toFixed(1)),
      rl_steps: summary.rewards.length,
      last_ten_reward: Number(lastTenMean.toFixed(3)),
      live_warm_start_step_seconds: Number(liveStep.toFixed(3)),
      live_warm_start_projected_seconds: Math.round(projectedWarmStart),
      live_over_shipped_training_wall: Number(
        ((total - summary.warmStart.seconds + projectedWarmStart) / total).toFixed(2),
      ),
    }),
  );
} finally {
  await rm(directory, { recursive: true, force: true });
}
