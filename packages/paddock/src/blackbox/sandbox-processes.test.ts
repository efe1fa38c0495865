// The sweep of stray processes acts only inside a sandbox's own PID namespace: run on a host (as
// this test is), it must kill nothing.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { inOwnPidNamespace, killStrayProcesses, processGroupRssBytes } from './sandbox-processes.js';

describe('sandbox processes', () => {
  it('kills nothing outside a PID namespace of its own, and measures a process group', async () => {
    const child = spawn('sleep', ['30'], { detached: true, stdio: 'ignore' });
    await new Promise((resolve) => child.once('spawn', resolve));
    try {
      expect(await inOwnPidNamespace()).toBe(false);
      expect(await killStrayProcesses([])).toBe(0);
      expect(child.exitCode).toBeNull();
      expect(child.signalCode).toBeNull();
      expect(await processGroupRssBytes(child.pid as number)).toBeGreaterThan(0);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
