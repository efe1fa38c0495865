// `dressage proxy`, `dressage engine` and `dressage blackbox-server` run the package's own bin in a
// child process, started as the bin's shebang starts it: a bin that needs V8 flags (the proxy's
// young generation and marking triggers) names them there, and `node <bin>` alone would drop them.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { DressageError } from '@dressage/protocol';

/** The Node flags of a `#!/usr/bin/env -S node <flags>` shebang; none for any other first line. */
export function shebangNodeFlags(source: string): string[] {
  const first = source.slice(0, source.indexOf('\n') >>> 0);
  const match = /^#!\/usr\/bin\/env -S node((?: +-[^\s]+)*) *$/.exec(first);
  return match === null ? [] : match[1]!.trim().split(/ +/).filter(Boolean);
}

/** Runs a bin file with this Node, its shebang's flags and `args`; resolves with its exit code. */
export function runBin(binPath: string, args: readonly string[]): Promise<number> {
  const flags = shebangNodeFlags(readFileSync(binPath, 'utf8').slice(0, 512));
  const child = spawn(process.execPath, [...flags, binPath, ...args], { stdio: 'inherit' });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
  return new Promise((resolve) => child.on('exit', (code) => resolve(code ?? 1)));
}

/**
 * Runs `binName` of `packageName` (as its manifest names it) with `args`.
 *
 * @throws DressageError `not_found` when the package has no such bin.
 */
export function delegate(packageName: string, binName: string, args: readonly string[]): Promise<number> {
  const require = createRequire(import.meta.url);
  const manifestPath = require.resolve(`${packageName}/package.json`);
  const manifest = require(manifestPath) as { bin?: Record<string, string> };
  const bin = manifest.bin?.[binName];
  if (bin === undefined)
    throw new DressageError({ code: 'not_found', message: `${packageName} has no ${binName} command` });
  return runBin(join(dirname(manifestPath), bin), args);
}
