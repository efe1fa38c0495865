import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  agentBinDirectories,
  agentInstallDir,
  agentPackages,
  ensureAgentInstalled,
  holdInstallLock,
} from './agent-install.js';

describe('agent installs', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'agent-install-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('lets one installer at a time into a directory', async () => {
    const events: string[] = [];
    const holder = async (name: string) => {
      const release = await holdInstallLock(join(scratch, 'cli.lock'));
      events.push(`${name} in`);
      await new Promise((resolve) => setTimeout(resolve, 50));
      events.push(`${name} out`);
      await release?.();
    };
    await Promise.all([holder('a'), holder('b')]);
    expect(
      [events.slice(0, 2), events.slice(2)].map((pair) => pair[0]?.split(' ')[0] === pair[1]?.split(' ')[0]),
    ).toEqual([true, true]);
  });

  it('takes over a lock whose holder exited, and waits on a live one', async () => {
    const path = join(scratch, 'left.lock');
    // A pid that existed and has exited: a killed test process leaves its lock like this.
    const { pid } = spawnSync('true');
    mkdirSync(path);
    writeFileSync(join(path, 'pid'), String(pid));
    const release = await holdInstallLock(path);
    expect(release).not.toBeNull();
    await release?.();

    mkdirSync(path);
    writeFileSync(join(path, 'pid'), String(process.pid));
    const waiting = holdInstallLock(path);
    const first = await Promise.race([
      waiting.then(() => 'taken'),
      new Promise((r) => setTimeout(r, 2500, 'waiting')),
    ]);
    expect(first).toBe('waiting');
    rmSync(path, { recursive: true, force: true });
    await (await waiting)?.();
  });

  it('ends an install at its deadline: npm killed, lock released, deadline_exceeded', async () => {
    // An npm that hangs as one does on a network that fails slowly (retrying every fetch).
    const fakeBin = join(scratch, 'fake-npm');
    mkdirSync(fakeBin, { recursive: true });
    const pidFile = join(scratch, 'npm.pid');
    writeFileSync(join(fakeBin, 'npm'), `#!/bin/sh\necho $$ > ${pidFile}\nexec sleep 60\n`);
    chmodSync(join(fakeBin, 'npm'), 0o755);
    const cacheDir = join(scratch, 'cache');
    const path = process.env.PATH;
    process.env.PATH = `${fakeBin}:${path ?? ''}`;
    try {
      const started = Date.now();
      const error = await ensureAgentInstalled(agentPackages.codex, { cacheDir, timeoutMs: 800 }).catch(
        (e) => e,
      );
      expect(error).toMatchObject({ code: 'deadline_exceeded' });
      expect(String(error.message)).toContain('npm was killed');
      expect(Date.now() - started).toBeLessThan(30_000);
      const pid = Number(readFileSync(pidFile, 'utf8'));
      expect(() => process.kill(pid, 0)).toThrow(expect.objectContaining({ code: 'ESRCH' }));
      expect(existsSync(`${agentInstallDir(agentPackages.codex, cacheDir)}.lock`)).toBe(false);

      // Another installer holding the lock: the wait counts against the same deadline.
      const lock = `${agentInstallDir(agentPackages.claude_code, cacheDir)}.lock`;
      mkdirSync(lock, { recursive: true });
      writeFileSync(join(lock, 'pid'), String(process.pid));
      const waited = await ensureAgentInstalled(agentPackages.claude_code, {
        cacheDir,
        timeoutMs: 300,
      }).catch((e) => e);
      expect(waited).toMatchObject({ code: 'deadline_exceeded' });
      expect(String(waited.message)).toContain('held its lock');
      expect(existsSync(lock)).toBe(true);
    } finally {
      process.env.PATH = path;
    }
  });

  it("puts a CLI's own Node first on its PATH, never replacing the system's", () => {
    expect(agentBinDirectories(agentPackages.openclaw, '/cache')).toEqual([
      '/cache/openclaw@2026.9.6/runtime/node_modules/.bin',
      '/cache/openclaw@2026.9.6/node_modules/.bin',
    ]);
    expect(agentBinDirectories(agentPackages.codex, '/cache')).toEqual([
      '/cache/@openai+codex@0.171.0/node_modules/.bin',
    ]);
  });
});
