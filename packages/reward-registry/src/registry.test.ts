import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { parseRewardModuleList, RewardRegistry } from './registry.js';

let directory: string;

async function rejection(promise: Promise<unknown>): Promise<DressageError> {
  try {
    await promise;
  } catch (error) {
    expect(DressageError.isInstance(error)).toBe(true);
    return error as DressageError;
  }
  throw new Error('expected a rejection');
}

beforeAll(() => {
  directory = mkdtempSync(join(tmpdir(), 'dressage-rewards-'));
  writeFileSync(
    join(directory, 'counted.mjs'),
    `globalThis.__rewardLoads = (globalThis.__rewardLoads ?? 0) + 1;
export const rewards = { length_bonus: (sample) => sample.response.length / 10 };`,
  );
  writeFileSync(
    join(directory, 'registering.mjs'),
    `export function register(registry) {
  registry.register('always_half', async () => 0.5);
  registry.register('keyed', () => ({ accuracy: 0.75, format: 1 }));
}`,
  );
  writeFileSync(join(directory, 'throws.mjs'), `throw new Error('boom at import');`);
  writeFileSync(join(directory, 'broken.mjs'), `export const = ;`);
  writeFileSync(join(directory, 'clash.mjs'), `export const rewards = { exact_match: () => 1 };`);
  const packageDirectory = join(directory, 'node_modules', 'my-rewards');
  mkdirSync(packageDirectory, { recursive: true });
  writeFileSync(
    join(packageDirectory, 'package.json'),
    JSON.stringify({ name: 'my-rewards', version: '1.0.0', main: 'index.js', type: 'module' }),
  );
  writeFileSync(join(packageDirectory, 'index.js'), `export const rewards = { from_package: () => 2 };`);
});

afterAll(() => rmSync(directory, { recursive: true, force: true }));
afterEach(() => vi.unstubAllEnvs());

describe('RewardRegistry', () => {
  it('starts with the built-ins', () => {
    expect(new RewardRegistry().names()).toEqual([
      'constant',
      'contains_label',
      'default',
      'exact_match',
      'metadata_score',
    ]);
    expect(new RewardRegistry({ builtins: false }).names()).toEqual([]);
  });

  it('rejects a duplicate name with already_exists', () => {
    const registry = new RewardRegistry();
    registry.register('mine', () => 1);
    expect(() => registry.register('mine', () => 2)).toThrowError(/already registered/);
    try {
      registry.register('exact_match', () => 2);
    } catch (error) {
      expect((error as DressageError).code).toBe('already_exists');
    }
    expect(registry.get('mine')(undefined as never, undefined as never)).toBe(1);
  });

  it('rejects empty names and non-functions', () => {
    const registry = new RewardRegistry();
    expect(() => registry.register(' ', () => 1)).toThrowError(/non-empty name/);
    expect(() => registry.register('x', 3 as never)).toThrowError(/must be a function/);
  });

  it('reports a missing name with the registered ones listed', () => {
    const registry = new RewardRegistry({ builtins: false });
    registry.register('b', () => 1);
    registry.register('a', () => 1);
    let caught: DressageError | undefined;
    try {
      registry.get('c');
    } catch (error) {
      caught = error as DressageError;
    }
    expect(caught?.code).toBe('not_found');
    expect(caught?.message).toBe('No reward function named "c"; registered: a, b');
    expect(caught?.details.registered).toEqual(['a', 'b']);
  });
});

describe('parseRewardModuleList', () => {
  it('splits on commas and drops blanks', () => {
    expect(parseRewardModuleList(' a , ./b.mjs,,c ')).toEqual(['a', './b.mjs', 'c']);
    expect(parseRewardModuleList('')).toEqual([]);
    expect(parseRewardModuleList(undefined)).toEqual([]);
  });
});

describe('loadModules', () => {
  it('loads file modules exporting rewards or register(), each once', async () => {
    const registry = new RewardRegistry();
    const before = (globalThis as { __rewardLoads?: number }).__rewardLoads ?? 0;
    const first = await registry.loadModules(`${join(directory, 'counted.mjs')}, ./registering.mjs`, {
      baseDirectory: directory,
    });
    expect(first).toHaveLength(2);
    expect(registry.has('length_bonus')).toBe(true);
    expect(registry.has('always_half')).toBe(true);
    expect(registry.has('keyed')).toBe(true);
    // Same modules again, by another spelling: nothing is re-imported or re-registered.
    const second = await registry.loadModules(['./counted.mjs', join(directory, 'registering.mjs')], {
      baseDirectory: directory,
    });
    expect(second).toEqual([]);
    expect((globalThis as { __rewardLoads?: number }).__rewardLoads).toBe(before + 1);
  });

  it('shares one import between concurrent loads', async () => {
    const registry = new RewardRegistry();
    const loads = await Promise.all([
      registry.loadModules('./registering.mjs', { baseDirectory: directory }),
      registry.loadModules('./registering.mjs', { baseDirectory: directory }),
    ]);
    expect(loads.flat()).toEqual(['./registering.mjs']);
  });

  it('reads DRESSAGE_REWARD_MODULES when no list is given', async () => {
    vi.stubEnv('DRESSAGE_REWARD_MODULES', `${join(directory, 'registering.mjs')}`);
    const registry = new RewardRegistry();
    await registry.loadModules();
    expect(registry.has('always_half')).toBe(true);
  });

  it('resolves package specifiers from the base directory', async () => {
    const registry = new RewardRegistry();
    await registry.loadModules('my-rewards', { baseDirectory: directory });
    expect(registry.has('from_package')).toBe(true);
  });

  it('names a missing module with not_found', async () => {
    const registry = new RewardRegistry();
    const error = await rejection(registry.loadModules('./nowhere.mjs', { baseDirectory: directory }));
    expect(error.code).toBe('not_found');
    expect(error.message).toContain('Cannot load reward module "./nowhere.mjs"');
    const missingPackage = await rejection(
      registry.loadModules('no-such-reward-package', { baseDirectory: directory }),
    );
    expect(missingPackage.message).toContain('"no-such-reward-package"');
  });

  it('names a module that throws or does not parse', async () => {
    const registry = new RewardRegistry();
    const thrown = await rejection(registry.loadModules('./throws.mjs', { baseDirectory: directory }));
    expect(thrown.code).toBe('failed_precondition');
    expect(thrown.message).toContain('"./throws.mjs"');
    expect(thrown.message).toContain('boom at import');
    const broken = await rejection(registry.loadModules('./broken.mjs', { baseDirectory: directory }));
    expect(broken.message).toContain('"./broken.mjs"');
  });

  it('reports a module whose reward names clash with registered ones', async () => {
    const registry = new RewardRegistry();
    const error = await rejection(registry.loadModules('./clash.mjs', { baseDirectory: directory }));
    expect(error.code).toBe('already_exists');
    expect(error.message).toContain('"./clash.mjs" failed to register');
    expect(error.message).toContain('"exact_match"');
  });
});

describe('parent registry', () => {
  it('finds names of the parent, its own first', () => {
    const parent = new RewardRegistry({ builtins: false });
    parent.register('on_import', () => 0.5);
    parent.register('shared', () => 1);
    const registry = new RewardRegistry({ builtins: false, parent });
    registry.register('shared', () => 2);
    expect(registry.has('on_import')).toBe(true);
    expect(registry.names()).toEqual(['on_import', 'shared']);
    expect(registry.get('on_import')(undefined as never, undefined as never)).toBe(0.5);
    expect(registry.get('shared')(undefined as never, undefined as never)).toBe(2);
    expect(() => registry.get('missing')).toThrowError(/registered: on_import, shared/);
  });

  it('sees rewards a module registers on import with registerReward', async () => {
    const registering = join(directory, 'register-on-import.mjs');
    const packageEntry = new URL('./index.ts', import.meta.url).href;
    writeFileSync(
      registering,
      `import { registerReward } from ${JSON.stringify(packageEntry)};\nregisterReward('from_import', () => 0.25);\n`,
    );
    const { defaultRewardRegistry } = await import('./registry.js');
    const registry = new RewardRegistry({ parent: defaultRewardRegistry });
    await registry.loadModules(registering);
    expect(registry.get('from_import')(undefined as never, undefined as never)).toBe(0.25);
    // Without the parent the run's registry would not find it.
    expect(new RewardRegistry().has('from_import')).toBe(false);
  });
});
