// Every recipe hook plugged in by module path drives a real (tiny) embedded training step.
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseHookReference } from './hooks.js';
import { readMetricsLog } from './metrics-log.js';
import { loadRecipe } from './recipe.js';
import { runTraining } from './training-run.js';

const here = dirname(fileURLToPath(import.meta.url));
const task = join(here, '..', '..', 'recipes', 'weather', 'task.ts');
const fixture = join(here, '__fixtures__', 'custom-hooks.ts');

describe('recipe hooks', () => {
  it('splits module references', () => {
    expect(parseHookReference('./task.ts#WeatherAgent')).toEqual({
      module: './task.ts',
      exportName: 'WeatherAgent',
    });
    expect(parseHookReference('@scope/package')).toEqual({ module: '@scope/package', exportName: 'default' });
  });

  it('loads data source, scheduler, reward post-process, convert and rollout log hooks by path', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-hooks-'));
    await writeFile(join(directory, 'unused.jsonl'), '');
    const recipePath = join(directory, 'recipe.yaml');
    await writeFile(
      recipePath,
      `name: hooks
output_dir: ${join(directory, 'run')}
data: { path: unused.jsonl, n_samples_per_prompt: 2, rollout_batch_size: 2 }
agent: { module: "${task}#WeatherAgent" }
rollout: { max_new_tokens: 8 }
engine: { kind: embedded, model: { layers: 1, d_model: 16, heads: 2, context: 256 }, vocabulary_texts: ["What is 1 + 1?"] }
trainer: { kind: embedded }
proxy: { token_build_model: qwen3 }
training: { steps: 1 }
hooks:
  data_source: "${fixture}#dataSource"
  rollout_scheduler: "${fixture}#scheduler"
  convert: "${fixture}#convert"
  reward_post_process: "${fixture}#postProcess"
  rollout_log_function: "${fixture}#rolloutLog"
  reward_modules: ["${task}"]
`,
    );
    const summary = await runTraining(await loadRecipe(recipePath), { log: () => undefined });
    expect(summary.stepsCompleted).toBe(1);
    const [record] = (await readMetricsLog(join(directory, 'run', 'metrics.jsonl'))).filter(
      (item) => item.phase === 'rl',
    );
    expect(record?.metrics).toMatchObject({
      'custom/data_source_calls': 1,
      'custom/scheduler_calls': 1,
      'custom/convert_calls': 1,
      'custom/post_process_calls': 1,
      'custom/hook_instances': 4,
    });
    expect(record?.metrics['custom/samples']).toBeGreaterThanOrEqual(4);
    // The default rollout metrics are still there (the log hook returned extra metrics, not `true`).
    expect(record?.metrics['rollout/num_trajectories']).toBe(4);
    // Samples routed to a distillation teacher get that teacher's trajectory-mean reward.
    const teachers = Object.keys(record?.metrics ?? {}).filter((key) => key.startsWith('rollout/mopd/'));
    expect(teachers.length).toBeGreaterThan(0);
    for (const key of teachers) {
      expect(key).toMatch(/^rollout\/mopd\/raw_reward_trainable_trajectory_mean\/teacher_[01]$/);
    }
  }, 300_000);

  it("rolls out with a generate hook given the run's proxy, with no agent module", async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-generate-hook-'));
    const twoTurn = join(here, '__fixtures__', 'two-turn-agent.ts');
    await writeFile(
      join(directory, 'prompts.jsonl'),
      `${JSON.stringify({ prompt: 'Weather in Oslo?', metadata: { teacher_id: 'alpha', reward_fn: 'by_teacher' } })}\n`,
    );
    const recipePath = join(directory, 'recipe.yaml');
    await writeFile(
      recipePath,
      `name: generate-hook
output_dir: ${join(directory, 'run')}
data: { path: prompts.jsonl, n_samples_per_prompt: 2, rollout_batch_size: 1 }
rollout: { max_new_tokens: 6 }
engine: { kind: embedded, model: { layers: 1, d_model: 16, heads: 2, context: 256 }, vocabulary_texts: ["And tomorrow?"] }
trainer: { kind: embedded }
proxy: { token_build_mode: snapshot, token_build_model: qwen3 }
training: { steps: 1 }
hooks:
  generate: "${twoTurn}#twoTurnGenerate"
  reward_modules: ["${twoTurn}"]
`,
    );
    const summary = await runTraining(await loadRecipe(recipePath, {}), { log: () => undefined });
    expect(summary.stepsCompleted).toBe(1);
    const samples = (await readFile(join(directory, 'run', 'samples', 'step-000000.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { segment_index: number; metadata: Record<string, unknown> });
    // Two samples of the hook's two-request agent: two segments each, all marked by the hook.
    expect(samples.map((sample) => sample.segment_index).sort()).toEqual([0, 0, 1, 1]);
    for (const sample of samples) expect(sample.metadata.generated_by).toBe('hook');
  }, 300_000);
});
