// Every binary answers `--help` with its usage (exit 0) and refuses a flag it does not know with exit
// 2, naming the flag, before it starts anything: an operator who asks for help never gets a server.
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';

const require = createRequire(import.meta.url);

function binOf(packageName: string, name: string): string {
  const manifestPath = require.resolve(`${packageName}/package.json`);
  const manifest = require(manifestPath) as { bin: Record<string, string> };
  return join(dirname(manifestPath), manifest.bin[name] as string);
}

const bins = {
  'dressage-proxy': binOf('@dressage/proxy', 'dressage-proxy'),
  'dressage-engine': binOf('@dressage/embedded', 'dressage-engine'),
  'dressage-blackbox-server': binOf('@dressage/paddock', 'dressage-blackbox-server'),
  'dressage-local-bwrap': binOf('@dressage/paddock', 'dressage-local-bwrap'),
  dressage: binOf('dressage', 'dressage'),
} as const;

// Each binary, and each subcommand that takes flags of its own.
const invocations: Array<[keyof typeof bins, string[]]> = [
  ['dressage-proxy', []],
  ['dressage-engine', []],
  ['dressage-engine', ['init']],
  ['dressage-engine', ['serve']],
  ['dressage-blackbox-server', []],
  ['dressage-local-bwrap', []],
  ['dressage-local-bwrap', ['start']],
  ['dressage', []],
  ['dressage', ['train']],
  ['dressage', ['warm-start']],
  ['dressage', ['report']],
  ['dressage', ['inspect']],
  ['dressage', ['proxy']],
];

function run(bin: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    // A binary that starts a server instead of answering would run on: the timeout kills it, and
    // the exit code is then null.
    execFile(
      process.execPath,
      [bin, ...args],
      { timeout: 60_000, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : null;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

describe('every binary', () => {
  it.each(invocations)(
    '%s %j --help prints the usage and exits 0',
    async (name, subcommand) => {
      const result = await run(bins[name], [...subcommand, '--help']);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(/usage|dressage — /i);
      expect(result.stdout).not.toMatch(/listening on/);
    },
    90_000,
  );

  it.each(invocations)(
    '%s %j --no-such-flag exits 2 naming the flag',
    async (name, subcommand) => {
      const result = await run(bins[name], [...subcommand, '--no-such-flag']);
      expect(result.code, result.stdout + result.stderr).toBe(2);
      expect(result.stdout + result.stderr).toContain('--no-such-flag');
      expect(result.stdout + result.stderr).not.toMatch(/listening on/);
    },
    90_000,
  );
});
