// The shipped blackbox recipe, trained for real: opencode in bubblewrap sandboxes, the recording
// proxy, the embedded engine and trainer; then the reward function on its own.
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startInspector } from '@dressage/inspector';
import { agentPackages, ensureAgentInstalled } from '@dressage/paddock';
import { createSample } from '@dressage/protocol';
import { describe, expect, it, vi } from 'vitest';
import { readMetricsLog } from '../../src/lib/metrics-log.js';
import { loadRecipe } from '../../src/lib/recipe.js';
import { runTraining } from '../../src/lib/training-run.js';
import { shellCheckReward } from './task.js';

type Json = Record<string, unknown>;

const recipeDirectory = new URL('.', import.meta.url).pathname;

async function agentInstalled(): Promise<string | null> {
  try {
    await ensureAgentInstalled(agentPackages.opencode, { timeoutMs: 720_000 });
    return null;
  } catch (error) {
    return String(error);
  }
}

describe('the blackbox recipe', () => {
  it('trains opencode agents in sandboxes through the proxy: steps, metrics, report, inspector', async (context) => {
    const skipReason = await agentInstalled();
    if (skipReason !== null) {
      console.warn(`[dressage] skipping the blackbox recipe: cannot install opencode: ${skipReason}`);
      context.skip();
    }
    const directory = await mkdtemp(join(tmpdir(), 'dressage-blackbox-'));
    try {
      const recipePath = join(directory, 'recipe.yaml');
      await writeFile(
        recipePath,
        // Relative paths resolve against this file: name the recipe's own files absolutely.
        [
          `extends: ${join(recipeDirectory, 'recipe.yaml')}`,
          `output_dir: ${join(directory, 'run')}`,
          `data: { path: ${join(recipeDirectory, 'prompts.jsonl')} }`,
          `blackbox: { system_prompt: ${join(recipeDirectory, 'system-prompt.txt')} }`,
          `hooks: { reward_modules: [${join(recipeDirectory, 'task.ts')}] }`,
          '',
        ].join('\n'),
      );
      const lines: string[] = [];
      // The progress line goes to stdout.
      const written: string[] = [];
      const write = process.stdout.write.bind(process.stdout);
      const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk, ...rest) => {
        written.push(String(chunk));
        return write(chunk, ...(rest as []));
      });
      const summary = await runTraining(await loadRecipe(recipePath), {
        steps: 1,
        log: (line) => lines.push(line),
      }).finally(() => spy.mockRestore());
      expect(summary.stepsCompleted).toBe(1);
      expect(lines.some((line) => line.startsWith('blackbox agents: opencode-ai@1.18.33'))).toBe(true);
      expect(written.join('')).toMatch(/RL \[#+\] 1\/1 .* \| reward \d/);
      expect(summary.maxLogprobDiff).toBeLessThanOrEqual(1e-4);

      const output = join(directory, 'run');
      const [record] = (await readMetricsLog(join(output, 'metrics.jsonl'))).filter(
        (entry) => entry.phase === 'rl',
      );
      expect(record!.metrics['rollout/num_trajectories']).toBe(2);
      expect(record!.metrics['train/train_rollout_logprob_abs_diff_max']).toBeLessThanOrEqual(1e-4);
      expect(existsSync(summary.reportPath)).toBe(true);
      expect(await readFile(summary.reportPath, 'utf8')).toContain('<svg');

      // Each sample is opencode's own request as the proxy recorded it (bash the only tool, the
      // recipe's system prompt), the model's tokens trained, and the check command's result.
      const samples = (await readFile(join(output, 'samples', 'step-000000.jsonl'), 'utf8'))
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as Json);
      expect(samples).toHaveLength(2);
      for (const sample of samples) {
        const metadata = sample.metadata as Json;
        expect(metadata.blackbox_agent_error_kind, JSON.stringify(metadata)).toBeUndefined();
        const tokens = sample.tokens as number[];
        const mask = sample.loss_mask as number[];
        expect(tokens.length).toBeGreaterThan(1000);
        expect(mask.some((value) => value === 1)).toBe(true);
        const results = metadata.execute_cmds as Json[];
        expect(results.map((result) => [result.stage, result.name])).toEqual([['after_agent', 'check']]);
        expect(sample.reward).toBe(results[0]!.returncode === 0 ? 1 : 0);
      }

      // The inspector opens the run and decodes its trajectories.
      const inspector = await startInspector({ run: output, port: 0 });
      try {
        const info = (await (await fetch(`${inspector.url}api/info`)).json()) as Json;
        expect(info.sessionCount).toBe(2);
        const page = (await (await fetch(`${inspector.url}api/sessions`)).json()) as { items?: Json[] };
        const first = page.items?.[0];
        expect(first).toBeDefined();
        const detail = await fetch(`${inspector.url}api/sessions/${encodeURIComponent(String(first!.id))}`);
        expect(detail.status).toBe(200);
      } finally {
        await inspector.close();
      }
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  }, 900_000);
});

describe('shell check reward', () => {
  const sample = (results: unknown) =>
    createSample({
      index: 0,
      group_index: 0,
      metadata: results === undefined ? {} : { execute_cmds: results },
    });

  it('is 1 exactly when the after-agent check command exited 0', () => {
    const check = { stage: 'after_agent', name: 'check', returncode: 0, timed_out: false };
    expect(shellCheckReward(sample([check]))).toBe(1);
    expect(shellCheckReward(sample([{ ...check, returncode: 1 }]))).toBe(0);
    expect(shellCheckReward(sample([{ ...check, timed_out: true }]))).toBe(0);
    expect(shellCheckReward(sample([{ ...check, stage: 'before_agent' }]))).toBe(0);
    expect(shellCheckReward(sample(undefined))).toBe(0);
  });
});
