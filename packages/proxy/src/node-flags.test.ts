import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { readmeExample } from '@dressage/vitest-config/readme';
import { describe, expect, it } from 'vitest';
import { proxyNodeFlags } from './node-flags.js';

describe('the proxy V8 flags', () => {
  it('are the ones the bin starts with', () => {
    const shebang = readFileSync(new URL('./bin/dressage-proxy.ts', import.meta.url), 'utf8').split('\n')[0];
    expect(shebang).toBe(`#!/usr/bin/env -S node ${proxyNodeFlags.join(' ')}`);
  });

  it('are the ones the README tells embedders to pass', () => {
    const readme = new URL('../README.md', import.meta.url).pathname;
    expect(readmeExample(readme, 'node-flags')).toBe(`node ${proxyNodeFlags.join(' ')} my-server.js`);
  });

  it('are refused in NODE_OPTIONS, so the README does not tell embedders to put them there', () => {
    const run = spawnSync(process.execPath, ['-e', '0'], {
      encoding: 'utf8',
      env: { ...process.env, NODE_OPTIONS: proxyNodeFlags.join(' ') },
    });
    expect(run.status).not.toBe(0);
    expect(run.stderr).toMatch(/is not allowed in NODE_OPTIONS/);
  });

  it('are accepted by this Node (an unknown V8 flag would stop the bin from starting)', () => {
    const run = spawnSync(process.execPath, [...proxyNodeFlags, '-e', 'process.stdout.write("ok")'], {
      encoding: 'utf8',
    });
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe('ok');
    expect(run.status).toBe(0);
    // A flag V8 does not know fails the same way the bin would.
    const unknown = spawnSync(process.execPath, ['--incremental-marking-no-such-trigger=1', '-e', '0'], {
      encoding: 'utf8',
    });
    expect(unknown.status).not.toBe(0);
  });
});
