// What one sandbox can reach: the host's root-only files (no, even when the pool runs as root), its
// own workspace (yes), another slot's BlackboxServer (no: every slot server requires its own token).
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findFreePortRange } from './free-ports.js';
import { LocalBwrapProvider } from './local-bwrap-provider.js';
import type { SandboxLease } from './types.js';

const asRoot = process.getuid?.() === 0;

/**
 * TCP ports listened on by the processes whose environment holds `marker`, read from /proc the way
 * any local process could: their socket inodes matched against /proc/net/tcp.
 */
function listeningPortsOf(marker: string): number[] {
  const inodes = new Set<string>();
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      if (!readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(marker)) continue;
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        const socket = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (socket) inodes.add(socket[1] as string);
      }
    } catch {
      // Gone, or not ours to read.
    }
  }
  const ports: number[] = [];
  for (const line of readFileSync('/proc/net/tcp', 'utf8').trim().split('\n').slice(1)) {
    const fields = line.trim().split(/\s+/);
    if (fields[3] === '0A' && inodes.has(fields[9] as string)) {
      ports.push(Number.parseInt((fields[1] as string).split(':')[1] as string, 16));
    }
  }
  return ports;
}

describe('sandbox identity', () => {
  let baseDir: string;
  let provider: LocalBwrapProvider;

  beforeAll(async () => {
    baseDir = mkdtempSync(join(tmpdir(), 'paddock-identity-'));
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

describe('blackbox slots', () => {
  let baseDir: string;
  let provider: LocalBwrapProvider;
  let first: SandboxLease;
  let second: SandboxLease;

  beforeAll(async () => {
    baseDir = mkdtempSync(join(tmpdir(), 'paddock-slots-'));
    // A stand-in for the qwen CLI that only answers --version: enough for slot A's server to register
    // it and start its LLM proxy.
    const agentDir = join(baseDir, 'agent');
    mkdirSync(agentDir, { mode: 0o755 });
    chmodSync(baseDir, 0o755);
    writeFileSync(join(agentDir, 'qwen'), '#!/bin/sh\necho 0.0.0\n', { mode: 0o755 });
    provider = new LocalBwrapProvider({
      slots: 2,
      baseDir: join(baseDir, 'pool'),
      mode: 'blackbox',
      basePort: await findFreePortRange(2),
      healthIntervalSeconds: 0,
      extraReadOnlyMounts: [agentDir],
      env: { DRESSAGE_QWEN_CODE_BIN: join(agentDir, 'qwen') },
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

  it("keeps a command in slot B away from slot A's server and workspace", async () => {
    const a = endpoint(first);
    await provider.writeFile(first, 'secret.txt', 'slot A secret\n');
    // Slot A's own server runs commands for its lease holder (it knows it is inside a sandbox).
    const session = 'slot-a-session';
    const register = await fetch(`${a.url}/v1/rollout/register`, {
      method: 'POST',
      headers: { ...a.headers, 'content-type': 'application/json' },
      body: JSON.stringify({
        blackbox_type: 'qwen_code',
        router: 'http://127.0.0.1:9',
        bound_session_id: session,
        bound_instance_id: 'i',
      }),
    });
    expect(register.status, await register.clone().text()).toBe(200);
    // From inside slot B: every route of A but /health refuses, and A's files stay unread.
    const attack = `
      const base = ${JSON.stringify(a.url)};
      const tries = [
        ['GET', '/v1/status'],
        ['POST', '/v1/sessions/${session}/execute_cmd', { cmd: 'cat /workspace/secret.txt' }],
        ['POST', '/v1/rollout/register', { blackbox_type: 'qwen_code', router: 'x', bound_session_id: 's', bound_instance_id: 'i' }],
      ];
      const out = [];
      for (const [method, path, body] of tries) {
        const response = await fetch(base + path, { method, headers: { 'content-type': 'application/json' },
          body: body ? JSON.stringify(body) : undefined });
        out.push(response.status + ' ' + (await response.text()));
      }
      console.log(JSON.stringify(out));`;
    const fromB = await provider.runCommand(second, ['node', '--input-type=module', '-e', attack], {
      timeoutSeconds: 30,
    });
    expect(fromB.returncode, fromB.stderr).toBe(0);
    const answers = JSON.parse(fromB.stdout.trim().split('\n').at(-1) as string) as string[];
    expect(answers).toHaveLength(3);
    for (const answer of answers) expect(answer.startsWith('401 ')).toBe(true);
    expect(fromB.stdout).not.toContain('slot A secret');
    // Nor can B see A's files or processes (and so A's token) directly.
    const look = await provider.runCommand(second, 'cat /workspace/secret.txt; ps -eo args=');
    expect(look.stdout).not.toContain('slot A secret');
    expect(look.stdout).not.toContain('dressage-blackbox-server');
  });

  it("keeps slot B's agent out of slot A's LLM proxy: no model calls into A's trajectory", async () => {
    // Slot A is registered (previous test); its LLM proxy listens on a free loopback port of the
    // shared network, which slot B can find the way this test does.
    const portA = Number(first.metadata.port);
    const proxyPorts = listeningPortsOf(`BBS_PORT=${portA}`).filter((port) => port !== portA);
    expect(proxyPorts.length).toBeGreaterThan(0);
    const attack = `
      const out = [];
      for (const port of ${JSON.stringify(proxyPorts)}) {
        const base = 'http://127.0.0.1:' + port;
        const health = await fetch(base + '/__proxy_health');
        const chat = (headers) => fetch(base + '/v1/chat/completions', { method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'injected' }] }) });
        out.push([health.status, (await chat({})).status, (await chat({ authorization: 'Bearer dressage' })).status]);
      }
      console.log(JSON.stringify(out));`;
    const fromB = await provider.runCommand(second, ['node', '--input-type=module', '-e', attack], {
      timeoutSeconds: 30,
    });
    expect(fromB.returncode, fromB.stderr).toBe(0);
    const answers = JSON.parse(fromB.stdout.trim().split('\n').at(-1) as string) as number[][];
    // Reachable (the health probe answers), yet every model call without A's agent key is refused.
    expect(answers).toEqual(proxyPorts.map(() => [200, 401, 401]));
  });
});
