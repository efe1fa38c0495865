import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalBwrapProvider } from './local-bwrap-provider.js';

describe('local bubblewrap sandboxes', () => {
  let baseDir: string;
  let provider: LocalBwrapProvider;
  let hostDir: string;
  let server: Server;
  let hostPort: number;

  beforeAll(async () => {
    baseDir = mkdtempSync(join(tmpdir(), 'paddock-pool-'));
    hostDir = mkdtempSync(join(tmpdir(), 'paddock-host-'));
    writeFileSync(join(hostDir, 'secret.txt'), 'host secret');
    provider = new LocalBwrapProvider({
      slots: 2,
      baseDir: join(baseDir, 'pool'),
      mode: 'command_only',
      unshareNet: true,
      healthIntervalSeconds: 0,
      limits: { maxProcesses: 64 },
    });
    server = createServer((_request, response) => response.end('reachable'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    hostPort = (server.address() as AddressInfo).port;
    await provider.pool.start();
  });

  afterAll(async () => {
    await provider.close();
    server.close();
    rmSync(baseDir, { recursive: true, force: true });
    rmSync(hostDir, { recursive: true, force: true });
  });

  it('writes inside the work dir and fails to write anywhere else', async () => {
    const lease = await provider.create({ trajectoryId: 'writes' });
    const inside = await provider.runCommand(lease, 'echo ok > note.txt && cat /workspace/note.txt');
    expect(inside.returncode).toBe(0);
    expect(inside.stdout.trim()).toBe('ok');
    for (const target of ['/usr/evil', '/etc/evil', '/evil', '/workspace_sandbox/evil']) {
      const outside = await provider.runCommand(lease, `echo x > ${target}`);
      expect(outside.returncode, target).not.toBe(0);
    }
    expect((await provider.readFile(lease, 'note.txt')).toString()).toBe('ok\n');
    await provider.terminate(lease);
  });

  it('hides host files outside the binds and refuses symlink escapes', async () => {
    const lease = await provider.create({ trajectoryId: 'hidden' });
    const read = await provider.runCommand(lease, `cat ${join(hostDir, 'secret.txt')}; ls /root`);
    expect(read.returncode).not.toBe(0);
    expect(read.stdout).not.toContain('host secret');
    const whoami = await provider.runCommand(lease, 'id -u; hostname');
    const [uid, hostname] = whoami.stdout.split('\n');
    // As root the sandbox runs as the slot's unprivileged host uid; otherwise as uid 1000 of a user
    // namespace mapped to the caller.
    const identity = provider.pool.hostIdentityOf(Number(lease.metadata.slot_id));
    expect(uid).toBe(String(identity?.uid ?? 1000));
    expect(hostname).toMatch(/^dressage-bb-\d{4}$/);
    await provider.runCommand(lease, `ln -s ${join(hostDir, 'secret.txt')} escape.txt`);
    await expect(provider.readFile(lease, 'escape.txt')).rejects.toThrow();
    await expect(provider.writeFile(lease, '/etc/passwd', 'x')).rejects.toThrow(/outside/);
    await provider.terminate(lease);
  });

  it('has no network egress when the network namespace is on', async () => {
    const lease = await provider.create({ trajectoryId: 'network' });
    const probe = await provider.runCommand(
      lease,
      `node -e "fetch('http://127.0.0.1:${hostPort}/').then(r=>r.text()).then(t=>{console.log(t);process.exit(0)},e=>{console.log('blocked',e.cause?.code);process.exit(3)})"`,
      { timeoutSeconds: 20 },
    );
    expect(probe.stdout).toContain('blocked');
    expect(probe.returncode).toBe(3);
    // The host itself reaches the server, so the sandbox was what blocked it.
    expect(await (await fetch(`http://127.0.0.1:${hostPort}/`)).text()).toBe('reachable');
    await provider.terminate(lease);
  });

  it('kills a runaway process group at the timeout', async () => {
    const lease = await provider.create({ trajectoryId: 'runaway' });
    // A duration no other process on the host uses, so the host-wide check below counts only ours.
    const duration = `300.${process.pid}${Date.now() % 1000}`;
    try {
      const result = await provider.runCommand(
        lease,
        `(sleep ${duration} & sleep ${duration} & setsid sleep ${duration} &) ; echo started; while true; do sleep 1; done`,
        { timeoutSeconds: 1 },
      );
      expect(result.timedOut).toBe(true);
      expect(result.stdout).toContain('started');
      // No sleeper survived in any namespace: ps sees only this probe's own processes.
      const after = await provider.runCommand(lease, 'ps -eo comm= | grep -c "^sleep$" || true');
      expect(after.stdout.trim()).toBe('0');
      const { execFileSync } = await import('node:child_process');
      const hostSleepers = () =>
        execFileSync('sh', ['-c', `ps -eo args= | grep -cx "sleep ${duration}" || true`])
          .toString()
          .trim();
      // SIGKILL is delivered asynchronously: give the killed group a moment to disappear from the host.
      for (let waited = 0; hostSleepers() !== '0' && waited < 5_000; waited += 100) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(hostSleepers()).toBe('0');
    } finally {
      // Release the slot even when an assertion failed, so later tests are not starved of slots.
      await provider.terminate(lease);
    }
  });

  it('gives the next lease of a slot none of the previous files', async () => {
    const first = await provider.create({ trajectoryId: 'first' });
    await provider.runCommand(
      first,
      'echo one > /workspace/a.txt; echo two > ~/b.txt; echo three > /tmp/c.txt',
    );
    const slotId = first.metadata.slot_id;
    await provider.terminate(first);
    await provider.pool.settled();
    // Take both slots so the same slot is certainly reused.
    const second = await provider.create({ trajectoryId: 'second' });
    const third = await provider.create({ trajectoryId: 'third' });
    const reused = second.metadata.slot_id === slotId ? second : third;
    expect(reused.metadata.slot_id).toBe(slotId);
    expect(reused.metadata.generation).toBeGreaterThan(0);
    const listing = await provider.runCommand(reused, 'ls -A /workspace ~ /tmp | grep -v : | grep . || true');
    expect(listing.stdout.trim()).toBe('');
    await provider.terminate(second);
    await provider.terminate(third);
  });

  it('acquires and releases idempotently by trajectory id', async () => {
    const [a, b] = await Promise.all([
      provider.create({ trajectoryId: 'same' }),
      provider.create({ trajectoryId: 'same' }),
    ]);
    expect(a.sandboxId).toBe(b.sandboxId);
    expect(provider.pool.status().leases).toBe(1);
    await provider.terminate('same');
    await provider.terminate('same');
    await provider.terminate(a);
    expect(provider.pool.leaseOf('same')).toBeUndefined();
    await provider.pool.settled();
    expect(provider.pool.status().counts.ready).toBe(2);
  });

  it('caps the process count where the machine allows it', async () => {
    const support = provider.pool.limitSupport;
    if (!support.processes) {
      console.warn(`process limit not testable here: ${support.reason}`);
      return;
    }
    const lease = await provider.create({ trajectoryId: 'forks' });
    const result = await provider.runCommand(
      lease,
      'ok=0; for i in $(seq 1 200); do (sleep 30 &) 2>/dev/null && ok=$((ok+1)); done; echo $ok',
      { timeoutSeconds: 20 },
    );
    expect(Number(result.stdout.trim().split('\n').at(-1))).toBeLessThan(200);
    await provider.terminate(lease);
  });

  it('reports status and expires leases past their TTL', async () => {
    const pool = new LocalBwrapProvider({
      slots: 1,
      baseDir: join(baseDir, 'ttl'),
      leaseTtlSeconds: 0.001,
      healthIntervalSeconds: 0,
    });
    await pool.create({ trajectoryId: 'short' });
    expect(pool.pool.status().slots[0]?.state).toBe('leased');
    await new Promise((resolve) => setTimeout(resolve, 5));
    await pool.pool.checkHealth();
    expect(pool.pool.leaseOf('short')).toBeUndefined();
    await pool.pool.settled();
    expect(pool.pool.status().slots[0]?.state).toBe('ready');
    await pool.close();
  });

  it('links created inside a slot cannot redirect host-side writes', async () => {
    const lease = await provider.create({ trajectoryId: 'links' });
    const dirs = provider.pool.directoriesOf(provider.pool.leaseOf('links')!);
    symlinkSync(hostDir, join(dirs.work, 'out'));
    await expect(provider.writeFile(lease, 'out/new/planted.txt', 'x')).rejects.toThrow(/outside/);
    await provider.terminate(lease);
  });
});
