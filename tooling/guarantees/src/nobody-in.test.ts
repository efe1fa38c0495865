// Nobody in: servers listen on loopback unless told otherwise, keys never need argv and are compared
// in constant time, the standalone BlackboxServer runs nothing on the host for whoever reaches it,
// sandboxes keep agents away from root-only files, from each other and from every host service (a
// blackbox slot reaches only the recording proxy, through the pool's pipe), and the inspector answers
// loopback names only. Real built CLIs, real bubblewrap, as root where CI runs as root.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { request } from 'node:http';
import { createRequire } from 'node:module';
import { networkInterfaces } from 'node:os';
import { dirname, join } from 'node:path';
import { startInspector } from '@dressage/inspector';
import { blackboxSlotServer } from '@dressage/paddock';
import { LocalBwrapProvider, type SandboxLease } from '@dressage/sandbox';
import { findFreePortRange } from '@dressage/sandbox/internal';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EngineStub } from './engine-stub.js';
import { startQwenEngineStub, temporaryDirectory } from './fixtures.js';
import { call, type ProxyProcess, proxyBin, qwenModelDirectory, startProxyProcess } from './proxy-process.js';
import { type ServerProcess, startServerProcess, statusOf } from './server-process.js';

const require = createRequire(import.meta.url);
const blackboxServerBin = join(
  dirname(require.resolve('@dressage/paddock/package.json')),
  'dist/bin/dressage-blackbox-server.js',
);
const asRoot = process.getuid?.() === 0;
const bwrapAvailable = (() => {
  try {
    execFileSync('bwrap', ['--version']);
    return true;
  } catch {
    return false;
  }
})();

/** A non-loopback IPv4 address of this machine, if it has one. */
function externalAddress(): string | null {
  for (const addresses of Object.values(networkInterfaces())) {
    for (const address of addresses ?? [])
      if (address.family === 'IPv4' && !address.internal) return address.address;
  }
  return null;
}

const portOf = (url: string) => new URL(url).port;
const scratch = temporaryDirectory('dressage-nobody-in-');
afterAll(() => scratch.remove());

describe('nobody in: dressage-proxy', () => {
  let proxy: ServerProcess | null = null;
  afterAll(async () => {
    await proxy?.kill();
  });

  it('listens on loopback unless told otherwise, and logs the address it bound', async () => {
    proxy = await startServerProcess(proxyBin, [
      '--tokenizer-path',
      qwenModelDirectory,
      '--token-build-model',
      'qwen3',
      '--store-dir',
      'none',
      '--port',
      '0',
    ]);
    expect(proxy.line).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+ /);
    expect(await statusOf(`${proxy.url}/health`)).toBe(200);
    const external = externalAddress();
    if (external !== null) {
      expect(await statusOf(`http://${external}:${portOf(proxy.url)}/health`)).toBe('ECONNREFUSED');
    }
    await proxy.kill();
  });

  it('takes its key from a file, keeps it out of argv, and refuses requests without it', async () => {
    const keyFile = join(scratch.path, 'proxy-key');
    writeFileSync(keyFile, 'proxy-secret-key\n', { mode: 0o600 });
    proxy = await startServerProcess(proxyBin, [
      '--tokenizer-path',
      qwenModelDirectory,
      '--token-build-model',
      'qwen3',
      '--store-dir',
      'none',
      '--port',
      '0',
      '--api-key-file',
      keyFile,
    ]);
    const models = `${proxy.url}/v1/models`;
    expect(await statusOf(models)).toBe(401);
    expect(await statusOf(models, { authorization: 'Bearer proxy-secret' })).toBe(401);
    expect(await statusOf(models, { authorization: 'Bearer proxy-secret-key' })).toBe(200);
    // What `ps` shows every user of the machine.
    const commandLine = readFileSync(`/proc/${proxy.child.pid}/cmdline`, 'utf8');
    expect(commandLine).not.toContain('proxy-secret-key');
  });
});

describe('nobody in: the standalone dressage-blackbox-server', () => {
  let server: ServerProcess;
  let workDir: string;
  const key = { authorization: 'Bearer blackbox-key' };

  beforeAll(async () => {
    workDir = join(scratch.path, 'blackbox-work');
    execFileSync('mkdir', ['-p', workDir]);
    const keyFile = join(scratch.path, 'blackbox-key');
    writeFileSync(keyFile, 'blackbox-key\n', { mode: 0o600 });
    server = await startServerProcess(blackboxServerBin, [], {
      cwd: workDir,
      env: {
        ...process.env,
        BBS_HOST: '',
        BBS_PORT: '0',
        BBS_RUNTIME_ROOT: join(workDir, '.runtime'),
        BBS_API_KEY_FILE: keyFile,
        BBS_MAX_REQUEST_MB: '1',
        BBS_INSIDE_SANDBOX: '',
      },
    });
  });
  afterAll(async () => {
    await server?.kill();
  });

  const post = async (path: string, body: unknown, headers: Record<string, string> = key) => {
    const response = await fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const register = (extra: Record<string, unknown>) =>
    post('/v1/rollout/register', {
      blackbox_type: 'qwen_code',
      router: 'http://127.0.0.1:9',
      bound_session_id: 's1',
      bound_instance_id: 'i1',
      ...extra,
    });

  it('listens on loopback by default and wants its key on every route but /health', async () => {
    expect(server.line).toMatch(
      /listening on http:\/\/127\.0\.0\.1:\d+ \(bearer key required; outside a sandbox/,
    );
    const external = externalAddress();
    if (external !== null) {
      expect(await statusOf(`http://${external}:${portOf(server.url)}/health`)).toBe('ECONNREFUSED');
    }
    expect(await statusOf(`${server.url}/health`)).toBe(200);
    expect(await statusOf(`${server.url}/v1/status`)).toBe(401);
    expect(await statusOf(`${server.url}/v1/status`, key)).toBe(200);
  });

  it('refuses execute_cmd outside a sandbox: nothing runs on the host', async () => {
    const marker = join(scratch.path, 'execute-cmd-ran');
    const refused = await post('/v1/sessions/s1/execute_cmd', { cmd: `cat /etc/shadow > ${marker}` });
    expect(refused).toMatchObject({ status: 403, body: { error: 'forbidden' } });
    expect(existsSync(marker)).toBe(false);
  });

  it('starts no executable a register request names and reads no file outside its own tree', async () => {
    const marker = join(scratch.path, 'backend-ran');
    const evil = join(scratch.path, 'evil.sh');
    writeFileSync(evil, `#!/bin/sh\ntouch ${marker}\n`);
    chmodSync(evil, 0o755);
    expect((await register({ backend_options: { command: evil } })).status).toBe(400);
    expect((await register({ blackbox_type: evil })).status).toBe(400);
    expect(existsSync(marker)).toBe(false);
    symlinkSync('/etc/shadow', join(workDir, 'prompt-link.txt'));
    for (const file of ['/etc/shadow', `${workDir}/../../../etc/shadow`, join(workDir, 'prompt-link.txt')]) {
      const refused = await register({ system_prompt_file: file });
      expect(refused.status, file).toBe(400);
      expect((refused.body.details as { errors: { path: string }[] }).errors[0]?.path, file).toBe(
        'system_prompt_file',
      );
    }
  });

  it('answers malformed %-escapes with 400 and oversize bodies with 413, and keeps serving', async () => {
    expect(await statusOf(`${server.url}/v1/sessions/%E0%A4%A`, key)).toBe(400);
    const big = await post('/v1/rollout/pause', { reason: 'x'.repeat(2 * 1024 * 1024) });
    expect(big.status).toBe(413);
    expect(await statusOf(`${server.url}/v1/status`, key)).toBe(200);
  });
});

describe.runIf(bwrapAvailable)('nobody in: blackbox pool slots in real bubblewrap', () => {
  const proxyKey = 'pool-proxy-key-0123456789';
  const host = (path: string, body?: unknown, headers: Record<string, string> = {}) =>
    call(proxy.url, path, body, { authorization: `Bearer ${proxyKey}`, ...headers });
  let provider: LocalBwrapProvider;
  let engine: EngineStub;
  let proxy: ProxyProcess;
  let slotA: SandboxLease;
  let slotB: SandboxLease;

  beforeAll(async () => {
    // The host's real services: an engine and the recording proxy in front of it, on loopback.
    engine = await startQwenEngineStub();
    // With a key: the pool adds it on the host side of each slot's socket, so no sandbox holds it.
    const keyFile = join(scratch.path, 'pool-proxy-key');
    writeFileSync(keyFile, `${proxyKey}\n`, { mode: 0o600 });
    proxy = await startProxyProcess(engine.url, ['--store-dir', 'none', '--api-key-file', keyFile]);
    // A stand-in agent CLI (the claude_code adapter's executable, run once per turn): one Anthropic
    // Messages call to the endpoint and token its adapter gives it, the reply printed as Claude Code's
    // stream-json result event.
    const agentDirectory = join(scratch.path, 'agent');
    mkdirSync(agentDirectory, { mode: 0o755 });
    chmodSync(scratch.path, 0o755);
    writeFileSync(
      join(agentDirectory, 'claude'),
      `#!/usr/bin/env node
if (process.argv.includes('--version')) { console.log('0.0.0'); process.exit(0); }
(async () => {
  const prompt = process.argv[process.argv.indexOf('-p') + 1];
  const response = await fetch(process.env.ANTHROPIC_BASE_URL + '/v1/messages', { method: 'POST',
    headers: { authorization: 'Bearer ' + process.env.ANTHROPIC_AUTH_TOKEN, 'content-type': 'application/json',
      'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: process.env.ANTHROPIC_MODEL, max_tokens: 64,
      messages: [{ role: 'user', content: prompt }] }) });
  const body = await response.json();
  const text = (body.content ?? []).filter((block) => block.type === 'text').map((block) => block.text).join('');
  console.log(JSON.stringify({ type: 'result', subtype: 'success', is_error: false,
    result: text || 'status ' + response.status }));
})();
`,
      { mode: 0o755 },
    );
    provider = new LocalBwrapProvider({
      slots: 2,
      mode: 'blackbox',
      server: blackboxSlotServer(),
      baseDir: join(scratch.path, 'pool'),
      basePort: await findFreePortRange(2),
      upstreamUrl: proxy.url,
      upstreamApiKey: proxyKey,
      healthIntervalSeconds: 0,
      extraReadOnlyMounts: [agentDirectory],
      env: { DRESSAGE_CLAUDE_CODE_BIN: join(agentDirectory, 'claude') },
    });
    await provider.pool.start();
    slotA = await provider.create({
      trajectoryId: 'slot-a',
      sessionId: 'nobody-in-slot-a',
      metadata: { paddock_mode: 'blackbox' },
    });
    slotB = await provider.create({ trajectoryId: 'slot-b', metadata: { paddock_mode: 'blackbox' } });
  }, 120_000);
  afterAll(async () => {
    await provider?.close();
    await proxy?.kill();
    await engine?.close();
  });

  const endpointOf = (lease: SandboxLease) =>
    lease.endpoints.blackbox as { url: string; headers: Record<string, string> };
  const callA = async (method: string, path: string, body?: unknown) => {
    const a = endpointOf(slotA);
    const response = await fetch(`${a.url}${path}`, {
      method,
      headers: { ...a.headers, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  it("the agent in slot A reaches the model through its LLM proxy and the pool's pipe, and is recorded", async () => {
    const session = 'nobody-in-slot-a';
    const registered = await callA('POST', '/v1/rollout/register', {
      blackbox_type: 'claude_code',
      router: proxy.url,
      bound_session_id: session,
      bound_instance_id: 'task',
    });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    const turn = await callA('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 'turn-1',
      messages: [{ role: 'user', content: 'say ok' }],
    });
    expect(turn.status, JSON.stringify(turn.body)).toBe(200);
    // One model step, answered by the engine behind the recording proxy.
    expect(turn.body.usage).toMatchObject({ steps: 1, output_tokens: 2 });
    // The recording proxy on the host holds the call, with a trainable response.
    expect((await host('/session/finalize', { session_id: session })).status).toBe(200);
    const read = await host('/trajectory/read', { trajectory_id: session });
    const data = read.body.data as Array<{ full_loss_mask: number[] }>;
    expect(data.length).toBeGreaterThan(0);
    expect(data[0]?.full_loss_mask.some((bit) => bit === 1)).toBe(true);
  });

  it("an agent on its slot's upstream socket gets model calls under its own session, and nothing else", async () => {
    // Another rollout's session, recorded on the host.
    const chat = { model: 'policy', messages: [{ role: 'user', content: 'hello' }] };
    const victim = 'nobody-in-victim';
    expect((await host('/v1/chat/completions', chat, { 'x-session-id': victim })).status).toBe(200);
    // From inside slot B (its lease's session is its trajectory id, `slot-b`), straight at the
    // socket: the trainer's routes, another session's id, then a model call of its own.
    const attempts = [
      ['POST', '/trajectory/read', { trajectory_id: victim }, {}],
      ['POST', '/session/finalize', { session_id: victim }, {}],
      ['POST', '/session/discard', { session_id: victim }, {}],
      ['GET', '/trajectory/stats', null, {}],
      ['POST', '/v1/rollout/pause', { reason: 'agent' }, {}],
      ['POST', '/v1/chat/completions', chat, { 'x-session-id': victim }],
      ['POST', `/s/${victim}/v1/chat/completions`, chat, {}],
      ['POST', '/v1/chat/completions', { ...chat, session_id: victim }, {}],
    ];
    const attack = `
      import { request } from 'node:http';
      const out = [];
      for (const [method, path, body, headers] of ${JSON.stringify(attempts)}) {
        out.push(await new Promise((resolve) => {
          const sent = request({ socketPath: '/workspace_sandbox/network/upstream.sock', method, path,
            headers: { 'content-type': 'application/json', ...headers } }, (response) => {
            let text = '';
            response.on('data', (chunk) => { text += chunk; });
            response.on('end', () => resolve([response.statusCode, JSON.parse(text)]));
          });
          sent.on('error', (error) => resolve([0, error.code]));
          sent.end(body === null ? undefined : JSON.stringify(body));
        }));
      }
      console.log(JSON.stringify(out));`;
    const fromB = await provider.runCommand(slotB, ['node', '--input-type=module', '-e', attack], {
      timeoutSeconds: 60,
    });
    expect(fromB.returncode, fromB.stderr).toBe(0);
    const answers = JSON.parse(fromB.stdout.trim().split('\n').at(-1) as string) as [
      number,
      { error?: { code: string; message: string }; choices?: unknown[] },
    ][];
    for (const [status, body] of answers.slice(0, 5)) {
      expect(status, JSON.stringify(body)).toBe(403);
      expect(body.error?.code).toBe('route_not_allowed');
    }
    const [foreignHeader, foreignBase, ownCall] = answers.slice(5) as (typeof answers)[0][];
    for (const [status, body] of [foreignHeader!, foreignBase!]) {
      expect(status).toBe(403);
      expect(body.error).toMatchObject({ code: 'session_not_allowed' });
      expect(body.error?.message).toContain(victim);
    }
    // The model call of its own works, and the proxy recorded it under the slot's session.
    expect(ownCall![0], JSON.stringify(ownCall![1])).toBe(200);
    expect(ownCall![1].choices).toHaveLength(1);
    expect((await host('/session/finalize', { session_id: 'slot-b' })).status).toBe(200);
    const own = await host('/trajectory/read', { trajectory_id: 'slot-b' });
    expect(own.body.data as unknown[]).toHaveLength(1);
    // The victim's session holds its one call still, unread, unfinalized and unpaused.
    expect((await host('/v1/rollout/pause_state')).body).toMatchObject({ paused: false });
    expect((await host('/session/finalize', { session_id: victim })).status).toBe(200);
    const read = await host('/trajectory/read', { trajectory_id: victim });
    expect(read.body.data as unknown[]).toHaveLength(1);
  });

  it('a command in slot B reaches no host service, nor slot A, and reads nothing of A', async () => {
    const a = endpointOf(slotA);
    await provider.writeFile(slotA, 'secret.txt', 'slot A secret\n');
    expect((await fetch(`${a.url}/v1/status`, { headers: a.headers })).status).toBe(200);
    const ports = [portOf(proxy.url), portOf(engine.url), portOf(a.url)].map(Number);
    // Every one answers on the host.
    for (const port of ports)
      expect(await statusOf(`http://127.0.0.1:${port}/health`)).not.toBe('ECONNREFUSED');
    const attack = `
      import { connect } from 'node:net';
      const out = [];
      for (const port of ${JSON.stringify(ports)}) {
        out.push(await new Promise((resolve) => {
          const socket = connect(port, '127.0.0.1');
          socket.setTimeout(5000, () => { socket.destroy(); resolve('timeout'); });
          socket.once('connect', () => { socket.destroy(); resolve('connected'); });
          socket.once('error', (error) => resolve(error.code));
        }));
      }
      console.log(JSON.stringify(out));`;
    const fromB = await provider.runCommand(slotB, ['node', '--input-type=module', '-e', attack], {
      timeoutSeconds: 30,
    });
    expect(fromB.returncode, fromB.stderr).toBe(0);
    // The slot's network namespace has only its own loopback: nothing listens there.
    expect(JSON.parse(fromB.stdout.trim())).toEqual(ports.map(() => 'ECONNREFUSED'));
    const look = await provider.runCommand(slotB, 'cat /workspace/secret.txt; ps -eo args=');
    expect(look.stdout).not.toContain('slot A secret');
    expect(look.stdout).not.toContain('dressage-blackbox-server');
  });

  it.runIf(asRoot)(
    'as root, a sandbox cannot read root-only host files but writes its own workspace',
    async () => {
      expect(statSync('/etc/shadow').mode & 0o007).toBe(0);
      const probe = await provider.runCommand(slotB, 'id -u; cat /etc/shadow');
      expect(probe.stdout.split('\n')[0]).not.toBe('0');
      expect(probe.returncode).not.toBe(0);
      expect(probe.stdout).not.toMatch(/^root:/m);
      await provider.writeFile(slotB, 'given/by-host.txt', 'host\n');
      const write = await provider.runCommand(
        slotB,
        'echo agent >> given/by-host.txt && echo own > own.txt && cat given/by-host.txt',
      );
      expect(write).toMatchObject({ returncode: 0, stdout: 'host\nagent\n' });
    },
  );
});

describe.runIf(bwrapAvailable)('nobody in: command_only pool slots in real bubblewrap', () => {
  let provider: LocalBwrapProvider;
  let slot: SandboxLease;
  beforeAll(async () => {
    provider = new LocalBwrapProvider({
      slots: 1,
      mode: 'command_only',
      baseDir: join(scratch.path, 'command-pool'),
      healthIntervalSeconds: 0,
      diskLimitBytes: 64 * 1024 * 1024,
    });
    await provider.pool.start();
    slot = await provider.create({ trajectoryId: 'command-slot', metadata: { paddock_mode: 'whitebox' } });
  }, 120_000);
  afterAll(async () => {
    await provider?.close();
  });

  it.runIf(asRoot)(
    'a slot cannot write more than its quota: ENOSPC inside, the host keeps serving',
    async () => {
      expect(provider.pool.diskQuota).toEqual({ bytes: 64 * 1024 * 1024, reason: null });
      const fill = await provider.runCommand(
        slot,
        'dd if=/dev/zero of=/workspace/big bs=1M count=200; echo "dd=$?"; dd if=/dev/zero of=/tmp/big bs=1M count=200; echo "dd=$?"; du -sm /workspace/big /tmp/big',
        { timeoutSeconds: 120 },
      );
      expect(fill.stdout).toContain('dd=1');
      expect(fill.stdout).not.toContain('dd=0');
      expect(fill.stderr).toContain('No space left on device');
      // Both together stay within the slot's 64 MiB.
      const megabytes = fill.stdout
        .split('\n')
        .filter((line) => /^\d+\s/.test(line))
        .map((line) => Number(line.split(/\s/)[0]));
      expect(megabytes.reduce((sum, value) => sum + value, 0)).toBeLessThanOrEqual(65);
      // The slot works again once it frees space, and the host still writes files for it.
      const after = await provider.runCommand(
        slot,
        'rm /workspace/big /tmp/big && echo ok > small && cat small',
      );
      expect(after).toMatchObject({ returncode: 0, stdout: 'ok\n' });
      await provider.writeFile(slot, 'from-host.txt', 'host\n');
      expect((await provider.runCommand(slot, 'cat from-host.txt')).stdout).toBe('host\n');
    },
    180_000,
  );

  it('a sandbox cannot create a user namespace (no uid 0 of its own), and still runs processes and threads', async () => {
    const probe = await provider.runCommand(slot, 'unshare -U -r id -u; echo "unshare=$?"');
    expect(probe.stdout).toContain('unshare=1');
    expect(probe.stdout).not.toMatch(/^0$/m);
    expect(probe.stderr).toContain('Operation not permitted');
    // Nested sandboxing tools fail the same way.
    const nested = await provider.runCommand(
      slot,
      'bwrap --unshare-user --ro-bind / / true; echo "bwrap=$?"',
    );
    expect(nested.stdout).not.toContain('bwrap=0');
    // What a coding agent does still works: child processes, pipes, and threads (clone without the flag).
    const work = await provider.runCommand(
      slot,
      `sh -c 'echo child' | cat && node -e "const { Worker } = require('node:worker_threads'); new Worker('1', { eval: true }).on('exit', (code) => console.log('worker', code))"`,
    );
    expect(work).toMatchObject({ returncode: 0, stdout: 'child\nworker 0\n' });
  });
});

describe('nobody in: the inspector', () => {
  it('answers loopback Host names only, so a rebound domain reads nothing', async () => {
    const file = join(scratch.path, 'empty.jsonl');
    writeFileSync(file, '');
    const inspector = await startInspector({ file, port: 0 });
    try {
      const get = (host: string) =>
        new Promise<number>((resolve, reject) => {
          const sent = request(
            { host: '127.0.0.1', port: inspector.port, path: '/api/sessions', headers: { host } },
            (response) => {
              response.resume();
              resolve(response.statusCode ?? 0);
            },
          );
          sent.on('error', reject);
          sent.end();
        });
      expect(await get(`127.0.0.1:${inspector.port}`)).toBe(200);
      expect(await get(`localhost:${inspector.port}`)).toBe(200);
      expect(await get(`rebound.example:${inspector.port}`)).toBe(403);
    } finally {
      await inspector.close();
    }
  });
});
