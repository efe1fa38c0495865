// `dressage init`: the scaffold is the shipped recipe, it loads from a directory outside the
// repository, and the command refuses to overwrite what is there.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createSample, DressageError } from '@dressage/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadHook } from './hooks.js';
import { initProject, recipesDirectory, scaffoldFiles } from './init.js';
import { runInitCommand } from './init-command.js';
import { loadRecipe } from './recipe.js';

const here = dirname(fileURLToPath(import.meta.url));

let directory: string;
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'dressage-init-'));
});
afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

function capture() {
  const out: string[] = [];
  const error: string[] = [];
  return {
    out,
    error,
    output: { out: (text: string) => out.push(text), error: (text: string) => error.push(text) },
  };
}

describe('dressage init', () => {
  it('writes the orders recipe as it ships, which loads and runs from outside the repository', async () => {
    const target = join(directory, 'my-agent');
    const result = await initProject({ directory: target });
    expect(result.files).toEqual(['package.json', 'README.md', 'recipe.yaml', 'task.ts', 'prompts.jsonl']);
    expect((await readdir(target)).sort()).toEqual([...result.files].sort());
    expect(JSON.parse(await readFile(join(target, 'package.json'), 'utf8'))).toEqual({
      private: true,
      type: 'module',
    });
    for (const file of result.files.filter((name) => name !== 'package.json')) {
      expect(await readFile(join(target, file), 'utf8')).toBe(
        await readFile(join(recipesDirectory(), 'orders', file), 'utf8'),
      );
    }
    // The recipe names its own files relatively; the task module imports only types, so it loads
    // from a directory with no packages beside it.
    const loaded = await loadRecipe(join(target, 'recipe.yaml'));
    expect(loaded.resolvePath(loaded.recipe.data.path)).toBe(join(target, 'prompts.jsonl'));
    expect(loaded.recipe.warm_start.steps).toBeGreaterThan(0);
    const Agent = await loadHook<
      new (
        options: unknown,
      ) => { run: unknown; setup: unknown; teardown: unknown }
    >(loaded.recipe.agent!.module, target);
    const agent = new Agent({});
    expect([typeof agent.setup, typeof agent.run, typeof agent.teardown]).toEqual([
      'function',
      'function',
      'function',
    ]);
    const rewards = await loadHook<Record<string, (sample: unknown) => number>>('./task.ts#rewards', target);
    const sample = (answer: string) =>
      createSample({
        label: 'late',
        response: answer,
        metadata: { order: { called_tool: true, final_answer: answer } },
      });
    expect(rewards.order!(sample('late'))).toBe(1);
    expect(rewards.order!(sample('sent'))).toBe(0);
    // Every prompt record names that reward and carries a label.
    const records = (await readFile(join(target, 'prompts.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { label: string; metadata: { reward_fn: string } });
    expect(records.every((record) => record.metadata.reward_fn === 'order' && record.label !== '')).toBe(
      true,
    );
  });

  it('scaffolds the opencode blackbox recipe with --agent opencode', async () => {
    const target = join(directory, 'cli-agent');
    const code = await runInitCommand([target, '--agent', 'opencode'], capture().output);
    expect(code).toBe(0);
    expect((await readdir(target)).sort()).toEqual([
      'README.md',
      'package.json',
      'prompts.jsonl',
      'recipe.yaml',
      'system-prompt.txt',
      'task.ts',
    ]);
    const loaded = await loadRecipe(join(target, 'recipe.yaml'));
    expect(loaded.recipe.blackbox?.agent).toBe('opencode');
    expect(loaded.resolvePath(loaded.recipe.blackbox!.system_prompt!)).toBe(
      join(target, 'system-prompt.txt'),
    );
    const files = await scaffoldFiles('opencode');
    expect(await readFile(join(target, 'task.ts'), 'utf8')).toBe(files.get('task.ts'));
  });

  it('refuses a directory that is not empty, naming it, unless --force', async () => {
    const target = join(directory, 'taken');
    await mkdir(target);
    await writeFile(join(target, 'notes.txt'), 'mine');
    await expect(initProject({ directory: target })).rejects.toSatisfy(
      (error) => DressageError.isInstance(error) && error.code === 'already_exists',
    );
    const refused = capture();
    expect(await runInitCommand([target], refused.output)).toBe(2);
    expect(refused.error.join('')).toContain(`${target} is not empty`);
    expect(await readdir(target)).toEqual(['notes.txt']);

    const forced = capture();
    expect(await runInitCommand([target, '--force'], forced.output)).toBe(0);
    expect((await readdir(target)).sort()).toEqual([
      'README.md',
      'notes.txt',
      'package.json',
      'prompts.jsonl',
      'recipe.yaml',
      'task.ts',
    ]);
    expect(await readFile(join(target, 'notes.txt'), 'utf8')).toBe('mine');
    expect(forced.out.join('')).toContain('next: dressage train --recipe');
  });

  it('answers --help, and refuses an unknown agent or a missing directory with a usage error', async () => {
    const help = capture();
    expect(await runInitCommand(['--help'], help.output)).toBe(0);
    expect(help.out.join('')).toContain('dressage init DIR');
    const unknown = capture();
    expect(await runInitCommand([join(directory, 'x'), '--agent', 'vim'], unknown.output)).toBe(2);
    expect(unknown.error.join('')).toContain('--agent must be one of whitebox, opencode');
    const missing = capture();
    expect(await runInitCommand([], missing.output)).toBe(2);
    expect(missing.error.join('')).toContain('name one directory');
  });

  it('is a subcommand of the dressage CLI, exiting 2 on a directory that is not empty', async () => {
    const target = join(directory, 'cli-taken');
    await mkdir(target);
    await writeFile(join(target, 'recipe.yaml'), 'name: mine\n');
    const bin = join(here, '..', 'bin', 'dressage.ts');
    const run = promisify(execFile);
    const failure = await run(process.execPath, ['--import', 'tsx', bin, 'init', target]).then(
      () => null,
      (error: { code: number; stderr: string }) => error,
    );
    expect(failure?.code).toBe(2);
    expect(failure?.stderr).toContain(`${target} is not empty`);
    expect(await readFile(join(target, 'recipe.yaml'), 'utf8')).toBe('name: mine\n');
    const { stdout } = await run(process.execPath, [
      '--import',
      'tsx',
      bin,
      'init',
      join(directory, 'cli-new'),
    ]);
    expect(stdout).toContain('recipe.yaml');
    expect((await readdir(join(directory, 'cli-new'))).length).toBe(5);
  }, 60_000);

  it('says what to do when the task module loads as CommonJS, from the dry run on', async () => {
    // Without the scaffold's package.json, Node loads task.ts as CommonJS and reports a require()
    // cycle; the dry run imports the recipe's modules as a run does, and names the fix. The built
    // CLI, as `pnpm dressage` runs it: it registers TypeScript loading for ES modules only.
    const target = join(directory, 'no-package');
    await initProject({ directory: target });
    const packageJson = await readFile(join(target, 'package.json'), 'utf8');
    await rm(join(target, 'package.json'));
    const bin = join(here, '..', '..', 'dist', 'bin', 'dressage.js');
    const run = promisify(execFile);
    const dryRun = [bin, 'train', '--recipe', join(target, 'recipe.yaml'), '--dry-run'];
    const failure = await run(process.execPath, dryRun).then(
      () => null,
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    expect(failure?.code).toBe(1);
    const report = `${failure?.stdout}${failure?.stderr}`;
    expect(report).toMatch(/FAIL\s+recipe modules/);
    expect(report).toContain(
      `Node loaded task.ts as CommonJS: no package.json from ${target} up says "type": "module"`,
    );
    expect(report).toContain(`Add a package.json with {"type": "module"} to ${target}`);
    await writeFile(join(target, 'package.json'), packageJson);
    const { stdout } = await run(process.execPath, dryRun);
    expect(stdout).toMatch(/ok\s+recipe modules\s+1 loaded: \.\/task\.ts/);
  }, 120_000);
});
