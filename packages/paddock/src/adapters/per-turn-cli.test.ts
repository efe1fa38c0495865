// A per-turn CLI's `--version` runs once per server process and executable: not at every
// registration and health probe. A failed check is not remembered.
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { AdapterContext } from '../blackbox/adapter.js';
import { ClaudeCodeAdapter } from './claude-code.js';

const dir = mkdtempSync(join(tmpdir(), 'paddock-version-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A stand-in CLI that counts its `--version` runs in a file and exits with `code`. */
function cli(name: string, code: number): { path: string; runs: () => number } {
  const path = join(dir, name);
  const count = join(dir, `${name}.count`);
  writeFileSync(count, '');
  writeFileSync(path, `#!/bin/sh\necho run >> ${count}\necho 0.0.0\nexit ${code}\n`);
  chmodSync(path, 0o755);
  return { path, runs: () => readFileSync(count, 'utf8').split('\n').filter(Boolean).length };
}

const context = (runtimeDir: string): AdapterContext => ({
  runtimeDir,
  workDir: dir,
  proxyOrigin: 'http://127.0.0.1:9',
  proxyApiKey: 'key',
  apiPath: '/v1',
  systemPrompt: null,
  routerTimeoutMs: 1000,
  sessionId: 's',
  instanceId: 'i',
  drainModelRequests: async () => undefined,
});

async function withBin<T>(path: string, run: () => Promise<T>): Promise<T> {
  const previous = process.env.DRESSAGE_CLAUDE_CODE_BIN;
  process.env.DRESSAGE_CLAUDE_CODE_BIN = path;
  try {
    return await run();
  } finally {
    if (previous === undefined) delete process.env.DRESSAGE_CLAUDE_CODE_BIN;
    else process.env.DRESSAGE_CLAUDE_CODE_BIN = previous;
  }
}

describe('per-turn CLI version check', () => {
  it('runs --version once for many registrations and health probes', async () => {
    const good = cli('good-cli', 0);
    await withBin(good.path, async () => {
      for (const sample of ['a', 'b', 'c']) {
        const adapter = new ClaudeCodeAdapter({});
        await adapter.init(context(join(dir, `rt-${sample}`)));
        expect(await adapter.health()).toBe(true);
        await adapter.close();
      }
    });
    expect(good.runs()).toBe(1);
  });

  it('runs a failed check again, and refuses to register', async () => {
    const bad = cli('bad-cli', 1);
    await withBin(bad.path, async () => {
      const adapter = new ClaudeCodeAdapter({});
      await expect(adapter.init(context(join(dir, 'rt-bad')))).rejects.toThrow(/--version failed/);
      expect(await adapter.health()).toBe(false);
    });
    expect(bad.runs()).toBe(2);
  });
});
