// docs/getting-started.md, run as a reader would: its files are what `dressage init` writes; written
// out from the page, `dressage train` learns from them (the reward rises because tool use rises); the
// report draws the run; `dressage inspect` serves the failures the page tells the reader to look for.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scaffoldFiles } from './init.js';
import { readMetricsLog } from './metrics-log.js';

const here = dirname(fileURLToPath(import.meta.url));
const tutorialPath = join(here, '..', '..', '..', '..', 'docs', 'getting-started.md');
// The built CLI, as a reader runs it (the test task builds first).
const bin = join(here, '..', '..', 'dist', 'bin', 'dressage.js');

/** The page's files: fenced blocks whose info string names `file=NAME`, concatenated per file. */
function tutorialFiles(markdown: string): Map<string, string> {
  const blocks = new Map<string, string[]>();
  for (const match of markdown.matchAll(/^```\w+ file=(\S+)\n([\s\S]*?)^```$/gm)) {
    const [, name, text] = match;
    blocks.set(name!, [...(blocks.get(name!) ?? []), text!]);
  }
  // A file shown in several blocks is one blank line between them.
  return new Map([...blocks].map(([name, parts]) => [name, parts.join('\n')]));
}

function mean(values: readonly number[]): number {
  return values.reduce((sum, value) => sum + value, 0) / values.length;
}

let directory: string;
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'dressage-getting-started-'));
});
afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

describe('docs/getting-started.md', () => {
  it('shows exactly the files dressage init writes', async () => {
    const page = tutorialFiles(await readFile(tutorialPath, 'utf8'));
    const scaffold = await scaffoldFiles('whitebox');
    expect([...page.keys()].sort()).toEqual(['package.json', 'prompts.jsonl', 'recipe.yaml', 'task.ts']);
    for (const [name, text] of page) expect(text, name).toBe(scaffold.get(name));
  });

  it('trains from its files: the reward rises with tool use; report and inspector show the run', async () => {
    // The reader's directory, written from the page; the run goes where the page says (runs/orders,
    // relative to where the command runs).
    const agentDirectory = join(directory, 'my-agent');
    await mkdir(agentDirectory);
    for (const [name, text] of tutorialFiles(await readFile(tutorialPath, 'utf8')))
      await writeFile(join(agentDirectory, name), text);
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [bin, 'train', '--recipe', 'my-agent/recipe.yaml'],
      { cwd: directory, maxBuffer: 64 * 1024 * 1024 },
    );
    expect(stdout).toContain('report:  runs/orders/report.html');
    expect(stdout).toContain('inspect --run runs/orders');
    const run = join(directory, 'runs', 'orders');

    const rl = (await readMetricsLog(join(run, 'metrics.jsonl'))).filter((record) => record.phase === 'rl');
    const rewards = rl.map((record) => record.metrics['rollout/raw_reward_trajectory_mean']!);
    const segments = rl.map((record) => record.metrics['rollout/segments_per_trajectory_mean']!);
    console.info(
      `getting started: rewards ${rewards.map((reward) => reward.toFixed(2)).join(' ')}; ` +
        `segments ${segments.map((count) => count.toFixed(2)).join(' ')}\n${stdout.split('\n').slice(-12).join('\n')}`,
    );
    // Learned: the reward starts near what answers from memory earn and rises; tool use (two
    // segments per conversation) rises with it. Margins for sampling noise (32 conversations a step).
    const first = mean(rewards.slice(0, 3));
    const last = mean(rewards.slice(-3));
    expect(first).toBeLessThan(0.45);
    expect(last).toBeGreaterThan(0.6);
    expect(last - first).toBeGreaterThan(0.3);
    expect(mean(segments.slice(-3)) - mean(segments.slice(0, 3))).toBeGreaterThan(0.3);
    expect(
      Math.max(...rl.map((record) => record.metrics['train/train_rollout_logprob_abs_diff_max'] ?? 1)),
    ).toBeLessThanOrEqual(1e-4);

    // The report draws the curves the page tells the reader to read.
    const report = await readFile(join(run, 'report.html'), 'utf8');
    for (const title of ['Reward', 'Segments per trajectory', 'Train / rollout logprob difference'])
      expect(report).toContain(`<h2>${title}</h2>`);

    // The inspector, started as the page says, lists failures and opens one.
    const inspector = spawn(process.execPath, [bin, 'inspect', '--run', run, '--port', '0'], {
      cwd: directory,
    });
    try {
      const url = await inspectorUrl(inspector);
      const failures = (await (await fetch(new URL('api/sessions?rewardMax=0&limit=5', url))).json()) as {
        total: number;
        items: { id: string; reward: number }[];
      };
      expect(failures.total).toBeGreaterThan(0);
      expect(failures.items.every((item) => item.reward === 0)).toBe(true);
      const detail = (await (
        await fetch(new URL(`api/sessions/${encodeURIComponent(failures.items[0]!.id)}`, url))
      ).json()) as { segments: { messages: { role: string }[] }[] };
      expect(detail.segments[0]!.messages.map((message) => message.role)).toContain('assistant');
    } finally {
      inspector.kill('SIGINT');
    }
    // Minutes on an idle 2-core machine; several times that on a loaded one.
  }, 3_600_000);
});

// The URL `dressage inspect` prints once it listens.
function inspectorUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      const match = /sessions at (http:\/\/\S+)/.exec(text);
      if (match) resolve(match[1]!);
    });
    child.on('exit', (code) => reject(new Error(`dressage inspect exited ${code}: ${text}`)));
  });
}
