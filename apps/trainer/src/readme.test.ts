// The README's recipe example, run as a user runs it: saved beside the shipped weather recipe (a copy,
// so the run writes nothing into the source tree), trained by the dressage CLI in a child process.
import { spawn } from 'node:child_process';
import { cp, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readmeExample } from '@dressage/vitest-config/readme';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from './lib/__fixtures__/cli.js';

const appDirectory = fileURLToPath(new URL('../', import.meta.url));
// Inside the app (ignored by git), so the copied task module resolves the workspace packages.
const directory = join(appDirectory, '.tmp', `readme-${process.pid}`);

afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

describe('README', () => {
  it('trains the example recipe for its two steps from the shipped warm-start', async () => {
    const weather = join(directory, 'recipes', 'weather');
    await mkdir(weather, { recursive: true });
    await cp(join(appDirectory, 'recipes', 'weather'), weather, {
      recursive: true,
      filter: (source) => !source.endsWith('.test.ts'),
    });
    await writeFile(join(weather, 'short.yaml'), readmeExample(join(appDirectory, 'README.md'), 'recipe'));

    const { code, output } = await runCli(
      ['train', '--recipe', 'recipes/weather/short.yaml'],
      process.env,
      directory,
    );
    expect(code, output).toBe(0);

    const run = join(directory, 'runs', 'weather-short');
    expect((await readdir(run)).sort()).toEqual(
      expect.arrayContaining(['checkpoints', 'metrics.jsonl', 'report.html', 'samples']),
    );
    const records = (await readFile(join(run, 'metrics.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { phase?: string; step?: number });
    // The warm-start came from the shipped cache: no supervised step ran, two RL steps did.
    expect(records.filter((record) => record.phase === 'warm_start')).toEqual([]);
    expect(records.filter((record) => record.phase === 'rl').map((record) => record.step)).toEqual([0, 1]);
    expect(await readdir(join(run, 'checkpoints'))).toEqual(
      expect.arrayContaining(['step-000001', 'step-000002']),
    );
  }, 600_000);

  it('lists the commands exactly as dressage --help prints them', async () => {
    const child = spawn(
      process.execPath,
      [
        '--conditions=@dressage/source',
        '--import',
        'tsx',
        join(appDirectory, 'src', 'bin', 'dressage.ts'),
        '--help',
      ],
      { cwd: appDirectory, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code).toBe(0);
    expect(readmeExample(join(appDirectory, 'README.md'), 'commands')).toBe(output.trimEnd());
  });
});
