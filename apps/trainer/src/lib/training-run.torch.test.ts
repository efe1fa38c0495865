// The weather recipe with the PyTorch trainer (recipes/weather/torch.yaml), shortened: the app
// starts the Python worker, warm-starts through it, and runs RL steps with the TypeScript engine and
// proxy. What is checked is the seam, not learning (the full run's figures are in the worker's
// README): every step trains and publishes a new version the engine serves, and the PyTorch
// trainer recomputes the engine's own tokens within 1e-4.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readMetricsLog } from './metrics-log.js';
import { loadRecipe } from './recipe.js';
import { runTraining } from './training-run.js';

const recipes = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'recipes', 'weather');

let directory: string;
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'dressage-torch-'));
});
afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

describe('the weather recipe with the PyTorch trainer', () => {
  it('warm-starts and trains through the Python worker with logprob parity on own-version tokens', async () => {
    const loaded = await loadRecipe(join(recipes, 'torch.yaml'));
    const { recipe } = loaded;
    expect(recipe.trainer).toMatchObject({ kind: 'grpc', worker: { actor: 'torch' } });
    recipe.output_dir = join(directory, 'run');
    // A few steps of everything, small batches: the CPU cost of a CI check, not of a training run.
    recipe.warm_start.steps = 12;
    recipe.data.rollout_batch_size = 2;
    recipe.training.checkpoint_interval = 2;
    const summary = await runTraining(loaded, { steps: 3, log: () => undefined });
    expect(summary.stepsCompleted).toBe(3);
    // Warm-start publishes once, then one update per RL step.
    expect(summary.weightVersion).toBe('4');
    expect(summary.maxLogprobDiff).toBeGreaterThan(0);
    expect(summary.maxLogprobDiff).toBeLessThanOrEqual(1e-4);
    const records = await readMetricsLog(join(recipe.output_dir, 'metrics.jsonl'));
    const warm = records.filter((record) => record.phase === 'warm_start');
    const rl = records.filter((record) => record.phase === 'rl');
    expect(warm).toHaveLength(12);
    expect(warm.at(-1)!.metrics['warm_start/sft_loss']!).toBeLessThan(
      warm[0]!.metrics['warm_start/sft_loss']!,
    );
    for (const record of rl) {
      expect(Number.isFinite(record.metrics['train/grad_norm'])).toBe(true);
      expect(record.metrics['parity/logprob_abs_diff_max']).toBeLessThanOrEqual(1e-4);
    }
  }, 600_000);
});
