// The rollout modes on a real engine: the weather recipe trained in sync, fully-async and
// partial-async mode one after another in this process, each from the shipped warm-start, with the
// engine the recipe gives each mode (the trainer's process in sync mode, its own process in the async
// modes) on the same machine. Reported per mode: wall time per RL step (median), the trainer's idle
// share, trajectories per second and the last-ten reward; the baseline is sync, measured in the same
// run. Unlike the schedulers' simulation, generation here competes with training for the same CPU.
// Flags: --steps N (RL steps per mode, default the recipe's). The last line is one JSON object.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { readMetricsLog } from '../src/lib/metrics-log.js';
import { Progress } from '../src/lib/progress.js';
import { loadRecipe } from '../src/lib/recipe.js';
import { runTraining } from '../src/lib/training-run.js';

const { values } = parseArgs({ options: { steps: { type: 'string' } } });
const recipes = new URL('../recipes/weather/', import.meta.url).pathname;
const modes = [
  ['sync', 'recipe.yaml'],
  ['fully-async', 'fully-async.yaml'],
  ['partial-async', 'partial-async.yaml'],
] as const;
const directory = await mkdtemp(join(tmpdir(), 'dressage-modes-bench-'));
const quiet = new Progress({ stream: { write: () => true }, live: false });

function median(values: number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;
}

interface ModeResult {
  mode: string;
  stepSeconds: number;
  trainerIdle: number;
  trajectoriesPerSecond: number;
  lastTen: number;
}

try {
  const results: ModeResult[] = [];
  for (const [mode, file] of modes) {
    const loaded = await loadRecipe(join(recipes, file));
    loaded.recipe.output_dir = join(directory, mode);
    const summary = await runTraining(loaded, {
      log: () => undefined,
      progress: quiet,
      ...(values.steps === undefined ? {} : { steps: Number(values.steps) }),
    });
    if (summary.warmStart.source !== 'cached')
      throw new Error(`${mode} did not start from the shipped warm-start (${summary.warmStart.source})`);
    const rl = (await readMetricsLog(join(directory, mode, 'metrics.jsonl'))).filter(
      (record) => record.phase === 'rl',
    );
    const trajectories = rl.reduce(
      (sum, record) => sum + (record.metrics['rollout/num_trajectories'] ?? 0),
      0,
    );
    const lastTen = summary.rewards.slice(-10);
    results.push({
      mode,
      stepSeconds: median(rl.map((record) => record.metrics['perf/step_seconds'] ?? 0)),
      trainerIdle: rl.at(-1)?.metrics['perf/trainer_idle_fraction'] ?? 0,
      trajectoriesPerSecond: trajectories / summary.rlSeconds,
      lastTen: lastTen.reduce((sum, value) => sum + value, 0) / lastTen.length,
    });
  }
  const sync = results[0] as ModeResult;
  for (const result of results) {
    console.log(
      `${result.mode}: ${result.stepSeconds.toFixed(2)} s/step (median), trainer idle ${(result.trainerIdle * 100).toFixed(0)}%, ` +
        `${result.trajectoriesPerSecond.toFixed(2)} trajectories/s (${(result.trajectoriesPerSecond / sync.trajectoriesPerSecond).toFixed(2)}x sync), last ten ${result.lastTen.toFixed(2)}`,
    );
  }
  console.log(
    JSON.stringify({
      bench: 'modes',
      ...Object.fromEntries(
        results.flatMap((result) => [
          [`${result.mode}_step_seconds`, Number(result.stepSeconds.toFixed(2))],
          [`${result.mode}_trainer_idle`, Number(result.trainerIdle.toFixed(3))],
          [
            `${result.mode}_speedup_vs_sync`,
            Number((result.trajectoriesPerSecond / sync.trajectoriesPerSecond).toFixed(2)),
          ],
          [`${result.mode}_last_ten`, Number(result.lastTen.toFixed(3))],
        ]),
      ),
    }),
  );
} finally {
  await rm(directory, { recursive: true, force: true });
}
