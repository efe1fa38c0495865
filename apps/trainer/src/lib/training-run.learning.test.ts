// The shipped weather recipe, shortened to its first 24 RL steps: the reward must rise because RL
// teaches the warm-started model to call its tool. This is the end-to-end learning check; it takes
// a few minutes of CPU (the 200-step warm-start dominates).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readMetricsLog } from './metrics-log.js';
import { loadRecipe } from './recipe.js';
import { runTraining } from './training-run.js';

const here = dirname(fileURLToPath(import.meta.url));
const recipePath = join(here, '..', '..', 'recipes', 'weather', 'recipe.yaml');

function mean(values: readonly number[]): number {
  return values.reduce((sum, value) => sum + value, 0) / values.length;
}

describe('the shipped weather recipe', () => {
  it('raises the reward in its first RL steps, with logprob parity, as tool use grows', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-learning-'));
    try {
      const loaded = await loadRecipe(recipePath);
      loaded.recipe.output_dir = join(directory, 'run');
      // At the recipe's own learning rate (1e-3): 3e-3 rises twice as fast but can collapse right
      // after it saturates (one CI run fell from 0.94 to 0 at step 15), which is why the recipe
      // ships 1e-3. By step 24 the slowest run measured so far was past 0.7.
      loaded.recipe.training.steps = 24;
      loaded.recipe.training.checkpoint_interval = 100;
      const summary = await runTraining(loaded, { log: () => undefined });
      expect(summary.stepsCompleted).toBe(24);
      expect(summary.maxLogprobDiff).toBeLessThanOrEqual(1e-4);

      const rl = (await readMetricsLog(join(directory, 'run', 'metrics.jsonl'))).filter(
        (record) => record.phase === 'rl',
      );
      const rewards = rl.map((record) => record.metrics['rollout/raw_reward_trajectory_mean']!);
      const segments = rl.map((record) => record.metrics['rollout/segments_per_trajectory_mean']!);
      const first = mean(rewards.slice(0, 3));
      const last = mean(rewards.slice(-3));
      // Measured: about 0.12 → 0.88 over these steps (runs differ: concurrent rollouts reach the
      // engine in varying order). The margins leave room for that and for sampling noise (32
      // trajectories a step).
      expect(first).toBeLessThan(0.4);
      expect(last).toBeGreaterThan(0.55);
      expect(last - first).toBeGreaterThan(0.3);
      // The rise comes from calling the tool: two segments per trajectory instead of one.
      const firstSegments = mean(segments.slice(0, 3));
      const lastSegments = mean(segments.slice(-3));
      expect(firstSegments).toBeLessThan(1.4);
      expect(lastSegments).toBeGreaterThan(1.5);
      expect(lastSegments - firstSegments).toBeGreaterThan(0.3);
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  }, 1_200_000);
});
