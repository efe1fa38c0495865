// A blackbox pool with a server of its own: the pool starts it in each slot's sandbox with the slot's
// token on stdin, reaches it through the socket pipe on the host port, and records its state in
// pool.json for another process to read.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findFreePortRange } from './free-ports.js';
import { LocalBwrapPool } from './local-bwrap-pool.js';
import { readPoolState } from './pool-state.js';

// A slot server in the pool's contract: the token on stdin, a unix socket (BBS_SOCKET) when the slot
// has its own network namespace, otherwise BBS_HOST:BBS_PORT; `/health` is open, the rest needs the token.
const serverScript = `
const http = require('node:http');
let token = '';
process.stdin.on('data', (chunk) => { token += chunk; });
process.stdin.on('end', () => {
  token = token.trim();
  const server = http.createServer((request, response) => {
    if (request.url === '/health') return response.end('ok');
    if (request.headers.authorization !== 'Bearer ' + token) { response.statusCode = 401; return response.end(); }
    response.end(JSON.stringify({ slot: process.env.DRESSAGE_BLACKBOX_SLOT_ID, user: process.getuid() }));
  });
  if (process.env.BBS_SOCKET) server.listen(process.env.BBS_SOCKET);
  else server.listen(Number(process.env.BBS_PORT), process.env.BBS_HOST);
});
`;

describe('a blackbox pool', () => {
  let baseDir: string;
  let pool: LocalBwrapPool;

  beforeAll(async () => {
    baseDir = mkdtempSync(join(tmpdir(), 'sandbox-blackbox-'));
    pool = new LocalBwrapPool({
      slots: 2,
      mode: 'blackbox',
      server: { command: ['/usr/bin/env', 'node', '-e', serverScript] },
      baseDir: join(baseDir, 'pool'),
      basePort: await findFreePortRange(2),
      healthIntervalSeconds: 0,
    });
    await pool.start();
  }, 60_000);
  afterAll(async () => {
    await pool.stop();
    rmSync(baseDir, { recursive: true, force: true });
  });

  it('refuses to start without a server to run', () => {
    const error = (() => {
      try {
        new LocalBwrapPool({ mode: 'blackbox', baseDir: join(baseDir, 'none') });
      } catch (caught) {
        return caught;
      }
    })();
    expect(error).toBeInstanceOf(DressageError);
    expect(error).toMatchObject({ code: 'invalid_argument', message: expect.stringMatching(/`server`/) });
  });

  it("serves each lease holder its slot's server, and nobody without the slot token", async () => {
    const first = await pool.acquire('traj-a');
    const second = await pool.acquire('traj-b');
    expect(first.slotId).not.toBe(second.slotId);
    const own = await fetch(first.sandboxUrl, { headers: first.headers });
    expect(own.status).toBe(200);
    expect(await own.json()).toMatchObject({ slot: String(first.slotId) });
    expect((await fetch(first.sandboxUrl)).status).toBe(401);
    expect((await fetch(first.sandboxUrl, { headers: second.headers })).status).toBe(401);
    await pool.release(first);
    await pool.release(second);
  });

  it('writes its status to pool.json, where another process reads it', async () => {
    const lease = await pool.acquire('traj-state');
    // Writes are queued: read until the one after the acquire has landed.
    let state = await readPoolState(pool.baseDir);
    for (let tries = 0; tries < 100 && state?.leases !== 1; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      state = await readPoolState(pool.baseDir);
    }
    expect(state).toMatchObject({ pid: process.pid, mode: 'blackbox', leases: 1 });
    expect(state?.slots.find((slot) => slot.slotId === lease.slotId)).toMatchObject({
      state: 'leased',
      trajectoryId: 'traj-state',
    });
    await pool.release(lease);
    expect(await readPoolState(join(baseDir, 'nowhere'))).toBeNull();
  });
});

// A slot server with a recycle route: it answers `RECYCLE_STATUS` there and says which process it is.
const recyclingServerScript = `
const http = require('node:http');
let token = '';
let recycled = 0;
process.stdin.on('data', (chunk) => { token += chunk; });
process.stdin.on('end', () => {
  token = token.trim();
  const server = http.createServer((request, response) => {
    if (request.url === '/health') return response.end('ok');
    if (request.headers.authorization !== 'Bearer ' + token) { response.statusCode = 401; return response.end(); }
    if (request.url === '/recycle') {
      recycled += 1;
      response.statusCode = Number(process.env.RECYCLE_STATUS);
      return response.end('{}');
    }
    response.end(JSON.stringify({ pid: process.pid, recycled }));
  });
  if (process.env.BBS_SOCKET) server.listen(process.env.BBS_SOCKET);
  else server.listen(Number(process.env.BBS_PORT), process.env.BBS_HOST);
});
`;

describe('a blackbox pool whose server has a recycle route', () => {
  let baseDir: string;
  beforeAll(() => {
    baseDir = mkdtempSync(join(tmpdir(), 'sandbox-recycle-'));
  });
  afterAll(() => rmSync(baseDir, { recursive: true, force: true }));

  const poolAnswering = async (status: number) =>
    new LocalBwrapPool({
      slots: 1,
      mode: 'blackbox',
      server: { command: ['/usr/bin/env', 'node', '-e', recyclingServerScript], recyclePath: '/recycle' },
      baseDir: join(baseDir, `pool-${status}`),
      basePort: await findFreePortRange(1),
      healthIntervalSeconds: 0,
      env: { RECYCLE_STATUS: String(status) },
    });
  const serverOf = async (lease: { sandboxUrl: string; headers: Record<string, string> }) =>
    (await (await fetch(lease.sandboxUrl, { headers: lease.headers })).json()) as {
      pid: number;
      recycled: number;
    };
  const plant =
    'echo a > /workspace/a.txt; echo a > "$HOME/.profile"; echo a > /tmp/a.txt; echo KEEPME > /workspace_sandbox/blackbox_server_runtime/kept.txt';
  const look = 'ls -A /workspace "$HOME" /tmp; cat /workspace_sandbox/blackbox_server_runtime/kept.txt 2>&1';

  it('keeps the server between leases, kills the lease commands and empties work, home and tmp', async () => {
    const pool = await poolAnswering(200);
    try {
      await pool.start();
      const first = await pool.acquire('traj-a');
      const before = await serverOf(first);
      expect((await pool.runInSlot(first, plant)).returncode).toBe(0);
      // A command still running when the lease ends.
      const running = pool.runInSlot(first, 'sleep 300');
      await pool.release(first);
      await pool.settled();
      const ended = await running;
      expect(ended.returncode).not.toBe(0);
      const second = await pool.acquire('traj-b');
      expect(second.slotId).toBe(first.slotId);
      expect(second.generation).toBe(first.generation + 1);
      expect(second.headers).toEqual(first.headers);
      expect(await serverOf(second)).toEqual({ pid: before.pid, recycled: 1 });
      const seen = await pool.runInSlot(second, look);
      expect(seen.stdout).not.toContain('a.txt');
      expect(seen.stdout).not.toContain('.profile');
      expect(seen.stdout).toContain('KEEPME');
      await pool.release(second);
    } finally {
      await pool.stop();
    }
  }, 120_000);

  it('restarts the slot when the server refuses to recycle', async () => {
    const pool = await poolAnswering(500);
    try {
      await pool.start();
      const first = await pool.acquire('traj-a');
      const before = await serverOf(first);
      expect((await pool.runInSlot(first, plant)).returncode).toBe(0);
      await pool.release(first);
      await pool.settled();
      const second = await pool.acquire('traj-b');
      const after = await serverOf(second);
      expect(after.recycled).toBe(0);
      expect(second.headers).not.toEqual(first.headers);
      const seen = await pool.runInSlot(second, look);
      expect(seen.stdout).not.toContain('a.txt');
      expect(seen.stdout).not.toContain('KEEPME');
      expect(before.recycled).toBe(0);
      await pool.release(second);
    } finally {
      await pool.stop();
    }
  }, 120_000);
});
