// Killing a sandboxed command kills the sandbox, also one that bwrap left behind in its own session.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildBwrapArgs, defaultSystemMounts, type SlotDirectories } from './bwrap-command.js';
import { runProcessGroup } from './process-group.js';
import { bwrapInfoFd, type SandboxProcess } from './sandbox-process.js';

// Alive and not a zombie (an orphan's parent may be slow to reap it).
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

async function until(condition: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(20);
  }
}

describe('SandboxProcess', () => {
  let baseDir: string;
  let directories: SlotDirectories;

  beforeAll(() => {
    baseDir = mkdtempSync(join(tmpdir(), 'sandbox-process-'));
    directories = { home: '', work: '', runtime: '', tmp: '' };
    for (const name of ['home', 'work', 'runtime', 'tmp'] as const) {
      directories[name] = join(baseDir, name);
      mkdirSync(directories[name]);
    }
  });

  afterAll(() => rmSync(baseDir, { recursive: true, force: true }));

  it('kills a sandbox that outlived bwrap when the command is aborted', async () => {
    // bwrap killed after the sandbox's setsid() and before it armed --die-with-parent leaves the
    // sandbox running; a bwrap without the flag is that state, held open.
    const argv = buildBwrapArgs(
      {
        directories,
        hostname: 'outlived',
        readOnlyMounts: defaultSystemMounts,
        env: { PATH: '/usr/bin:/bin' },
        infoFd: bwrapInfoFd,
      },
      ['/bin/sh', '-c', 'sleep 300'],
    ).filter((arg) => arg !== '--die-with-parent');
    const controller = new AbortController();
    let sandbox: SandboxProcess | undefined;
    const run = runProcessGroup(argv, {
      signal: controller.signal,
      bwrapInfo: true,
      onSpawn: (process) => {
        sandbox = process;
      },
    });
    await until(() => sandbox?.sandboxPid != null);
    const sandboxPid = sandbox?.sandboxPid as number;
    expect(alive(sandboxPid)).toBe(true);
    controller.abort();
    const result = await Promise.race([run, sleep(15_000).then(() => 'still running' as const)]);
    expect(result).not.toBe('still running');
    expect(result).toMatchObject({ aborted: true });
    await until(() => !alive(sandboxPid));
  }, 60_000);

  it('kills the sandbox once its pid arrives when the kill came first', async () => {
    // A stand-in for bwrap (its report must be unread at the kill, which a real bwrap cannot be made
    // to hold): it starts a command in a session of its own, as --new-session does, and waits for a
    // go file; then it reports the command's pid on descriptor 3 and marks a file. The test writes
    // the go file and keeps its event loop busy until the mark, so the report waits unread in the
    // pipe when the abort comes.
    const go = join(baseDir, 'go');
    const marker = join(baseDir, 'reported');
    const script = [
      "const { spawn } = require('node:child_process');",
      "const { existsSync, writeFileSync, writeSync } = require('node:fs');",
      "const sandbox = spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });",
      'const poll = setInterval(() => {',
      `  if (!existsSync(${JSON.stringify(go)})) return;`,
      '  clearInterval(poll);',
      "  writeSync(3, '{ \"child-pid\": ' + sandbox.pid + ' }');",
      `  writeFileSync(${JSON.stringify(marker)}, 'x');`,
      '  setInterval(() => {}, 1000);',
      '}, 5);',
    ].join('\n');
    const controller = new AbortController();
    let sandbox: SandboxProcess | undefined;
    const run = runProcessGroup([process.execPath, '-e', script], {
      signal: controller.signal,
      bwrapInfo: true,
      onSpawn: (process) => {
        sandbox = process;
      },
    });
    await until(() => sandbox !== undefined);
    writeFileSync(go, 'x');
    const wait = new Int32Array(new SharedArrayBuffer(4));
    const deadline = Date.now() + 20_000;
    while (!existsSync(marker) && Date.now() < deadline) Atomics.wait(wait, 0, 0, 10);
    expect(sandbox?.sandboxPid).toBeNull();
    controller.abort();
    await run;
    await until(() => sandbox?.sandboxPid != null);
    await until(() => !alive(sandbox?.sandboxPid as number));
  }, 60_000);
});
