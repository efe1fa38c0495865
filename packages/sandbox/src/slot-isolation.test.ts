// What one sandbox can reach of the host: root-only files (no, even when the pool runs as root) and
// its own workspace (yes, including files the host wrote for it).
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalBwrapProvider } from './local-bwrap-provider.js';

const asRoot = process.getuid?.() === 0;

describe('sandbox identity', () => {
  let baseDir: string;
  let provider: LocalBwrapProvider;

  beforeAll(async () => {
    baseDir = mkdtempSync(join(tmpdir(), 'sandbox-identity-'));
    provider = new LocalBwrapProvider({
      slots: 1,
      baseDir: join(baseDir, 'pool'),
      mode: 'command_only',
      healthIntervalSeconds: 0,
    });
    await provider.pool.start();
  });
  afterAll(async () => {
    await provider.close();
    rmSync(baseDir, { recursive: true, force: true });
  });

  it.runIf(asRoot)('keeps root-only host files closed when the pool runs as root', async () => {
    // /etc/shadow is root's alone (0640 root:shadow); a sandbox user mapped to host root read it.
    expect(statSync('/etc/shadow').mode & 0o007).toBe(0);
    const lease = await provider.create({ trajectoryId: 'shadow' });
    try {
      const probe = await provider.runCommand(lease, 'id -u; id -G; cat /etc/shadow');
      const [uid, groups] = probe.stdout.split('\n');
      expect(uid).not.toBe('0');
      expect(Number(uid)).toBe(provider.pool.hostIdentityOf(0)?.uid);
      expect(groups?.split(' ')).not.toContain('0');
      expect(probe.returncode).not.toBe(0);
      expect(probe.stderr).toContain('Permission denied');
      expect(probe.stdout).not.toMatch(/^root:/m);
      // No capabilities survive into the sandbox, so nothing can get them back.
      const capabilities = await provider.runCommand(lease, 'grep -E "^Cap(Eff|Prm|Bnd):" /proc/self/status');
      for (const line of capabilities.stdout.trim().split('\n')) expect(line).toMatch(/:\s+0+$/);
    } finally {
      await provider.terminate(lease);
    }
  });

  it('lets the sandboxed user write its workspace, including files the host wrote for it', async () => {
    const lease = await provider.create({ trajectoryId: 'workspace' });
    try {
      await provider.writeFile(lease, 'task/deep/input.txt', 'from the host\n');
      const result = await provider.runCommand(
        lease,
        'echo mine > own.txt && echo more >> task/deep/input.txt && mkdir task/deep/sub && ' +
          'echo home > ~/h.txt && echo tmp > /tmp/t.txt && cat task/deep/input.txt && whoami',
      );
      expect(result.stderr).toBe('');
      expect(result.returncode).toBe(0);
      expect(result.stdout).toContain('from the host\nmore\n');
      // The sandbox user has a name: programs that look themselves up (getpwuid) get an answer.
      expect(result.stdout.trim().split('\n').at(-1)).toEqual(asRoot ? 'blackbox' : expect.any(String));
    } finally {
      await provider.terminate(lease);
    }
  });
});
