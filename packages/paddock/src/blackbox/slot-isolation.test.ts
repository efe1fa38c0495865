// What one blackbox slot can reach: another slot's BlackboxServer or LLM proxy and any host TCP
// service (no: each blackbox slot has its own network namespace; every slot server also requires its
// own token). What any sandbox can reach of the host's files is tested in @dressage/sandbox.
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalBwrapProvider, type SandboxLease } from '@dressage/sandbox';
import { findFreePortRange } from '@dressage/sandbox/internal';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { blackboxSlotServer } from './slot-server.js';

const asRoot = process.getuid?.() === 0;

/**
 * TCP ports listened on by the processes whose environment holds `marker`, read from the host's /proc:
 * their socket inodes matched against the TCP table of their own network namespace.
 */
function listeningPortsOf(marker: string): number[] {
  const inodes = new Set<string>();
  let table = '';
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      if (!readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(marker)) continue;
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        const socket = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (socket) inodes.add(socket[1] as string);
      }
      table += readFileSync(`/proc/${pid}/net/tcp`, 'utf8');
    } catch {
      // Gone, or not ours to read.
    }
  }
  const ports: number[] = [];
  for (const line of table.trim().split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (fields[3] === '0A' && inodes.has(fields[9] as string)) {
      ports.push(Number.parseInt((fields[1] as string).split(':')[1] as string, 16));
    }
  }
  return ports;
}

describe('blackbox slots', () => {
  let baseDir: string;
  let provider: LocalBwrapProvider;
  let first: SandboxLease;
  let second: SandboxLease;

  beforeAll(async () => {
    baseDir = mkdtempSync(join(tmpdir(), 'paddock-slots-'));
    // A stand-in for the Claude Code CLI (a per-turn CLI) that only answers --version: enough for slot A's server to register
    // it and start its LLM proxy.
    const agentDir = join(baseDir, 'agent');
    mkdirSync(agentDir, { mode: 0o755 });
    chmodSync(baseDir, 0o755);
    writeFileSync(join(agentDir, 'claude'), '#!/bin/sh\necho 0.0.0\n', { mode: 0o755 });
    provider = new LocalBwrapProvider({
      slots: 2,
      baseDir: join(baseDir, 'pool'),
      mode: 'blackbox',
      server: blackboxSlotServer(),
      basePort: await findFreePortRange(2),
      healthIntervalSeconds: 0,
      extraReadOnlyMounts: [agentDir],
      env: { DRESSAGE_CLAUDE_CODE_BIN: join(agentDir, 'claude') },
    });
    await provider.pool.start();
    first = await provider.create({ trajectoryId: 'slot-a', metadata: { paddock_mode: 'blackbox' } });
    second = await provider.create({ trajectoryId: 'slot-b', metadata: { paddock_mode: 'blackbox' } });
  }, 120_000);
  afterAll(async () => {
    await provider.close();
    rmSync(baseDir, { recursive: true, force: true });
  });

  const endpoint = (lease: SandboxLease) => lease.endpoints.blackbox as { url: string; headers: Json };
  type Json = Record<string, string>;

  it('answers the lease holder, and nobody without the slot token', async () => {
    const a = endpoint(first);
    expect(a.headers.authorization).toMatch(/^Bearer .{32,}$/);
    expect(a.headers.authorization).not.toBe(endpoint(second).headers.authorization);
    expect((await fetch(`${a.url}/v1/status`, { headers: a.headers })).status).toBe(200);
    // A host process that is not the pool: no token, no entry.
    expect((await fetch(`${a.url}/v1/status`)).status).toBe(401);
    expect((await fetch(`${a.url}/health`)).status).toBe(200);
    // Another slot's token is not this slot's.
    expect((await fetch(`${a.url}/v1/status`, { headers: endpoint(second).headers })).status).toBe(401);
  });

  it.runIf(asRoot)("leaves the slot's sockets to the pool: nothing inside can replace them", async () => {
    const upstream = await createServer((_request, response) => response.end()).listen(0, '127.0.0.1');
    await new Promise<void>((resolve) => upstream.once('listening', resolve));
    const pool = new LocalBwrapProvider({
      slots: 1,
      baseDir: join(baseDir, 'own-sockets'),
      mode: 'blackbox',
      server: blackboxSlotServer(),
      basePort: await findFreePortRange(1),
      upstreamUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
      healthIntervalSeconds: 0,
    });
    try {
      await pool.pool.start();
      const lease = await pool.create({
        trajectoryId: 'own-sockets',
        metadata: { paddock_mode: 'blackbox' },
      });
      const network = '/workspace_sandbox/network';
      const swap = await pool.runCommand(
        lease,
        `rm -f ${network}/upstream.sock; echo "rm upstream $?"; rm -f ${network}/server/server.sock; echo "rm server $?"; ls ${network} ${network}/server`,
      );
      expect(swap.stdout, swap.stderr).toMatch(/^rm upstream [1-9]\d*\nrm server [1-9]/);
      expect(swap.stdout).toContain('upstream.sock');
      expect(swap.stdout).toContain('server.sock');
      const { url, headers } = endpoint(lease);
      expect((await fetch(`${url}/v1/status`, { headers })).status).toBe(200);
    } finally {
      await pool.close();
      await new Promise<void>((resolve) => upstream.close(() => resolve()));
    }
  });

  it("keeps a command in slot B away from slot A's server, its LLM proxy and host services", async () => {
    const a = endpoint(first);
    await provider.writeFile(first, 'secret.txt', 'slot A secret\n');
    // Slot A's own server runs commands for its lease holder (it knows it is inside a sandbox), and
    // registering starts its LLM proxy.
    const session = 'slot-a-session';
    const register = await fetch(`${a.url}/v1/rollout/register`, {
      method: 'POST',
      headers: { ...a.headers, 'content-type': 'application/json' },
      body: JSON.stringify({
        blackbox_type: 'claude_code',
        router: 'http://127.0.0.1:9',
        bound_session_id: session,
        bound_instance_id: 'i',
      }),
    });
    expect(register.status, await register.clone().text()).toBe(200);
    // A's LLM proxy listens on a loopback port of A's own network namespace.
    const portA = Number(first.metadata.port);
    const proxyPorts = listeningPortsOf(`BBS_PORT=${portA}`).filter((port) => port !== portA);
    expect(proxyPorts.length).toBeGreaterThan(0);
    // A real HTTP service on the host's loopback, like the engine's admin routes or the trainer.
    const hostService = createServer((_request, response) => response.end('host service'));
    await new Promise<void>((resolve) => hostService.listen(0, '127.0.0.1', resolve));
    const hostPort = (hostService.address() as AddressInfo).port;
    try {
      expect(await (await fetch(`http://127.0.0.1:${hostPort}/`)).text()).toBe('host service');
      // From inside slot B: a TCP connect to each target. The first one is B's own loopback (a server
      // the script starts), which shows that the probe itself works.
      const attack = `
        import { connect, createServer } from 'node:net';
        const own = createServer((socket) => socket.end()).listen(0, '127.0.0.1');
        await new Promise((resolve) => own.once('listening', resolve));
        const targets = [own.address().port, ${hostPort}, ${portA}, ...${JSON.stringify(proxyPorts)}];
        const out = [];
        for (const port of targets) {
          out.push(await new Promise((resolve) => {
            const socket = connect(port, '127.0.0.1');
            socket.setTimeout(5000, () => { socket.destroy(); resolve('timeout'); });
            socket.once('connect', () => { socket.destroy(); resolve('connected'); });
            socket.once('error', (error) => resolve(error.code));
          }));
        }
        own.close();
        console.log(JSON.stringify(out));`;
      const fromB = await provider.runCommand(second, ['node', '--input-type=module', '-e', attack], {
        timeoutSeconds: 60,
      });
      expect(fromB.returncode, fromB.stderr).toBe(0);
      const answers = JSON.parse(fromB.stdout.trim().split('\n').at(-1) as string) as string[];
      expect(answers[0]).toBe('connected');
      expect(answers.slice(1)).toHaveLength(2 + proxyPorts.length);
      for (const answer of answers.slice(1)) expect(answer).not.toBe('connected');
      // Nor can B see A's files or processes (and so A's token) directly.
      const look = await provider.runCommand(second, 'cat /workspace/secret.txt; ps -eo args=');
      expect(look.stdout).not.toContain('slot A secret');
      expect(look.stdout).not.toContain('dressage-blackbox-server');
    } finally {
      await new Promise<void>((resolve) => hostService.close(() => resolve()));
    }
  });
});
