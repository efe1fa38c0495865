import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { proxyNodeFlags } from '@dressage/proxy';
import { afterEach, describe, expect, it } from 'vitest';
import { runBin, shebangNodeFlags } from './bin-delegate.js';

let directory: string | null = null;
afterEach(() => {
  if (directory !== null) rmSync(directory, { recursive: true, force: true });
  directory = null;
});

describe('running a package bin', () => {
  it('reads the Node flags of an env -S shebang, and none from any other', () => {
    expect(shebangNodeFlags('#!/usr/bin/env -S node --a=1 --b\nrest')).toEqual(['--a=1', '--b']);
    expect(shebangNodeFlags('#!/usr/bin/env node\n')).toEqual([]);
    expect(shebangNodeFlags('#!/usr/bin/env -S node\n')).toEqual([]);
    expect(shebangNodeFlags('// no shebang\n')).toEqual([]);
    expect(shebangNodeFlags('#!/usr/bin/env -S deno run --allow-all\n')).toEqual([]);
  });

  it('starts the bin with its shebang flags, as running the file itself would', async () => {
    directory = mkdtempSync(join(tmpdir(), 'bin-delegate-'));
    const bin = join(directory, 'flags.mjs');
    const out = join(directory, 'out.json');
    writeFileSync(
      bin,
      `#!/usr/bin/env -S node --max-semi-space-size=64 --incremental-marking-soft-trigger=50\n` +
        `import { writeFileSync } from 'node:fs';\n` +
        `writeFileSync(${JSON.stringify(out)}, JSON.stringify({ flags: process.execArgv, args: process.argv.slice(2) }));\n`,
    );
    expect(await runBin(bin, ['--x', 'y'])).toBe(0);
    expect(JSON.parse(readFileSync(out, 'utf8'))).toEqual({
      flags: ['--max-semi-space-size=64', '--incremental-marking-soft-trigger=50'],
      args: ['--x', 'y'],
    });
  });

  it('gives `dressage proxy` the proxy bin V8 flags', () => {
    const require = createRequire(import.meta.url);
    const manifestPath = require.resolve('@dressage/proxy/package.json');
    const manifest = require(manifestPath) as { bin: Record<string, string> };
    const bin = readFileSync(join(dirname(manifestPath), manifest.bin['dressage-proxy']!), 'utf8');
    expect(shebangNodeFlags(bin)).toEqual(proxyNodeFlags);
  });
});
