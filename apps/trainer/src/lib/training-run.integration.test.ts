// A short embedded training run through every real component (engine, proxy in TITO mode, whitebox
// agent, rewards, conversion, TrainerService over gRPC), then a resumed run and a run killed with
// SIGKILL and resumed: the metrics log, checkpoints and data-source position continue where they were.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readMetricsLog } from './metrics-log.js';
import { loadRecipe } from './recipe.js';
import { runTraining } from './training-run.js';

const here = dirname(fileURLToPath(import.meta.url));
const appDirectory = join(here, '..', '..');
const weatherDirectory = join(appDirectory, 'recipes', 'weather');

async function writeRecipe(directory: string, steps: number): Promise<string> {
  const path = join(directory, 'recipe.yaml');
  await writeFile(
    path,
    `name: weather-smoke
seed: 3
output_dir: ${join(directory, 'run')}
data:
  path: ${join(weatherDirectory, 'prompts.jsonl')}
  n_samples_per_prompt: 4
  rollout_batch_size: 2
  shuffle: true
agent:
  module: ${join(weatherDirectory, 'task.ts')}#WeatherAgent
rollout: { temperature: 1.0, max_new_tokens: 24, max_retries: 1 }
engine:
  kind: embedded
  model: { layers: 1, d_model: 32, heads: 2, context: 256, seed: 3 }
trainer: { kind: embedded }
proxy: { token_build_model: qwen3 }
loss: { learning_rate: 0.001 }
warm_start: { steps: 3, batch_size: 16, learning_rate: 0.003, examples: ${join(weatherDirectory, 'task.ts')}#warmStartExamples }
training: { steps: ${steps}, checkpoint_interval: 1 }
hooks:
  reward_modules: [${join(weatherDirectory, 'task.ts')}]
`,
  );
  return path;
}

describe('dressage train on the embedded stack', () => {
  it('trains, checkpoints, resumes, and survives a killed process', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-train-'));
    const recipePath = await writeRecipe(directory, 2);
    const output = join(directory, 'run');
    const lines: string[] = [];
    // An earlier run left its proxy store in this output directory: a new run starts without it
    // (replayed, this line would keep the proxy from starting).
    await mkdir(join(output, 'proxy-store'), { recursive: true });
    await writeFile(join(output, 'proxy-store', 'trajectories.jsonl'), '{"op":"put","earlier_run":true}\n');

    const first = await runTraining(await loadRecipe(recipePath), { log: (line) => lines.push(line) });
    expect(first.stepsCompleted).toBe(2);
    expect(first.stopped).toBe(false);
    // Logprob parity: the trainer recomputed every trainable token's logprob as the engine reported it.
    expect(first.maxLogprobDiff).toBeLessThanOrEqual(1e-4);
    expect(lines.some((line) => line.startsWith('embedded stack: backend'))).toBe(true);
    expect(lines.some((line) => line.startsWith("new run: removed the earlier run's proxy store"))).toBe(
      true,
    );
    let records = await readMetricsLog(join(output, 'metrics.jsonl'));
    expect(records.filter((record) => record.phase === 'warm_start')).toHaveLength(3);
    const rl = records.filter((record) => record.phase === 'rl');
    expect(rl.map((record) => record.step)).toEqual([0, 1]);
    for (const record of rl) {
      expect(record.metrics['rollout/num_trajectories']).toBe(8);
      expect(record.metrics['train/train_rollout_logprob_abs_diff_max']).toBeLessThanOrEqual(1e-4);
      expect(Number.isFinite(record.metrics['rollout/raw_reward_trajectory_mean'])).toBe(true);
    }
    const state = JSON.parse(await readFile(join(output, 'run-state.json'), 'utf8'));
    expect(state.step).toBe(2);
    expect(existsSync(state.checkpoint)).toBe(true);
    // The trained samples are exported exactly: response masks and logprobs cover the response tail.
    const exported = (await readFile(join(output, 'samples', 'step-000000.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(exported.length).toBeGreaterThanOrEqual(8);
    for (const sample of exported) {
      expect(sample.loss_mask.length).toBe(sample.tokens.length - sample.prompt_length);
      expect(sample.rollout_log_probs.length).toBe(sample.loss_mask.length);
      if (sample.full_versions !== null) expect(sample.full_versions.length).toBe(sample.tokens.length);
    }
    const report = await readFile(first.reportPath, 'utf8');
    expect(report).toContain('<th>RL steps</th><td>2</td>');

    // Resume in-process: steps 2..3 run on top of the saved weights and data position.
    const resumedRecipe = await writeRecipe(directory, 4);
    const second = await runTraining(await loadRecipe(resumedRecipe), { resume: true, log: () => undefined });
    expect(second.stepsCompleted).toBe(4);
    expect(Number(second.weightVersion)).toBeGreaterThan(Number(first.weightVersion));
    records = await readMetricsLog(join(output, 'metrics.jsonl'));
    expect(records.filter((record) => record.phase === 'rl').map((record) => record.step)).toEqual([
      0, 1, 2, 3,
    ]);
    // No second warm-start on resume.
    expect(records.filter((record) => record.phase === 'warm_start')).toHaveLength(3);

    // Kill a resumed run with SIGKILL as soon as it has recorded one more step, then resume again.
    const killedRecipe = await writeRecipe(directory, 7);
    const child = spawn(
      process.execPath,
      [
        '--conditions=@dressage/source',
        '--import',
        'tsx',
        join(appDirectory, 'src', 'bin', 'dressage.ts'),
        'train',
        '--recipe',
        killedRecipe,
        '--resume',
      ],
      { cwd: appDirectory, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let childOutput = '';
    child.stdout.on('data', (chunk) => {
      childOutput += String(chunk);
    });
    child.stderr.on('data', (chunk) => {
      childOutput += String(chunk);
    });
    const exited = new Promise((resolve) => child.on('exit', resolve));
    // A second run started in the same directory while this one trains is refused before it
    // touches anything: it would remove the running run's proxy store.
    await new Promise<void>((resolve, reject) => {
      const timer = setInterval(() => {
        if (childOutput.includes('RL [')) {
          clearInterval(timer);
          resolve();
        } else if (child.exitCode !== null) {
          clearInterval(timer);
          reject(new Error(`the run ended before it trained:\n${childOutput}`));
        }
      }, 100);
    });
    const storeBefore = await readFile(join(output, 'proxy-store', 'LOCK'), 'utf8');
    await expect(runTraining(await loadRecipe(killedRecipe), { log: () => undefined })).rejects.toMatchObject(
      {
        code: 'failed_precondition',
        message: expect.stringContaining(`is in use by process ${child.pid} (one run per directory`),
      },
    );
    expect(await readFile(join(output, 'proxy-store', 'LOCK'), 'utf8')).toBe(storeBefore);
    await new Promise<void>((resolve, reject) => {
      const timer = setInterval(async () => {
        const state = JSON.parse(await readFile(join(output, 'run-state.json'), 'utf8'));
        if (state.step >= 5) {
          clearInterval(timer);
          child.kill('SIGKILL');
          resolve();
        } else if (child.exitCode !== null) {
          clearInterval(timer);
          reject(new Error(`the run ended before it could be killed:\n${childOutput}`));
        }
      }, 200);
    });
    await exited;
    const afterKill = JSON.parse(await readFile(join(output, 'run-state.json'), 'utf8'));
    expect(afterKill.step).toBeGreaterThanOrEqual(5);
    const third = await runTraining(await loadRecipe(killedRecipe), { resume: true, log: () => undefined });
    expect(third.stepsCompleted).toBe(7);
    records = await readMetricsLog(join(output, 'metrics.jsonl'));
    const steps = records.filter((record) => record.phase === 'rl').map((record) => record.step);
    // Every step up to 6 is recorded; a step the kill interrupted after its checkpoint may appear twice.
    expect(new Set(steps)).toEqual(new Set([0, 1, 2, 3, 4, 5, 6]));
    expect(third.maxLogprobDiff).toBeLessThanOrEqual(1e-4);
  }, 600_000);
});
