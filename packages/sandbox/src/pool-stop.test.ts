// Stopping a pool while a released slot is still being reset: the reset's new sandbox and its quota
// tmpfs must not outlive the stop (a tmpfs mounted after the stop's unmount kept the slot directory
// busy, and the stop failed with EBUSY removing it).
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalBwrapPool } from './local-bwrap-pool.js';

const baseDir = mkdtempSync(join(tmpdir(), 'sandbox-stop-'));
afterAll(() => rmSync(baseDir, { recursive: true, force: true }));

function mountsUnder(directory: string): string[] {
  return readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[1] ?? '')
    .filter((mountPoint) => mountPoint.startsWith(directory));
}

describe('LocalBwrapPool.stop', () => {
  it('waits for a reset in flight, and leaves no sandbox, mount or directory behind', async () => {
    // A stop at each moment of the reset a release starts: before the wipe, during it, while the
    // slot's next sandbox comes up, and after.
    for (const delayMs of [0, 5, 15, 30, 60, 120, 250]) {
      const directory = join(baseDir, `pool-${delayMs}`);
      const pool = new LocalBwrapPool({ slots: 1, baseDir: directory, healthIntervalSeconds: 0 });
      await pool.start();
      const lease = await pool.acquire(`traj-${delayMs}`);
      expect((await pool.runInSlot(lease, 'echo x > /workspace/x.txt')).returncode).toBe(0);
      await pool.release(lease);
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      await pool.stop();
      expect(existsSync(directory), `stopped ${delayMs} ms after the release`).toBe(false);
      expect(mountsUnder(directory)).toEqual([]);
    }
  }, 180_000);
});
