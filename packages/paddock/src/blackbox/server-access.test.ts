// Who may drive a BlackboxServer and what a caller can make it touch: bind address, bearer key,
// execute_cmd outside a sandbox, executables and files named by register, malformed paths, huge bodies.
import { chmodSync, existsSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ScriptAgentAdapter } from '../__fixtures__/script-agent.js';
import { ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import { builtinAdapters } from '../adapters/index.js';
import { blackboxApiKeyFromEnv, blackboxConfigFromEnv } from './config.js';
import { BlackboxServer } from './server.js';

type Json = Record<string, unknown>;

describe('BlackboxServer access', () => {
  let model: ScriptedModelServer;
  let workDir: string;
  let server: BlackboxServer | null = null;
  let base: string;
  let counter = 0;
  let agent: ScriptAgentAdapter | null = null;

  beforeAll(async () => {
    model = new ScriptedModelServer(() => ({ content: 'ok' }));
    await model.start();
  });
  afterAll(async () => {
    await model.close();
  });
  afterEach(async () => {
    await server?.close();
    server = null;
    rmSync(workDir, { recursive: true, force: true });
  });

  async function boot(options: { config?: Json; apiKey?: string } = {}) {
    workDir = mkdtempSync(join(tmpdir(), 'bbs-access-'));
    server = new BlackboxServer({
      config: {
        port: 0,
        runtime_root: join(workDir, '.runtime'),
        runtime_health_check_retries: 0,
        ...options.config,
      },
      workDir,
      apiKey: options.apiKey,
      adapters: {
        ...builtinAdapters,
        script_agent: () => {
          agent = new ScriptAgentAdapter();
          return agent;
        },
      },
    });
    base = await server.listen();
  }

  async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Json };
  }

  const register = (extra: Json = {}, headers: Record<string, string> = {}) => {
    counter += 1;
    return call(
      'POST',
      '/v1/rollout/register',
      {
        blackbox_type: 'script_agent',
        router: model.url,
        bound_session_id: `access-${counter}`,
        bound_instance_id: 'instance-1',
        ...extra,
      },
      headers,
    );
  };

  it('listens on loopback by default, from the class and from the environment', async () => {
    await boot();
    expect(server?.boundAddress).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(blackboxConfigFromEnv({}).host).toBe('127.0.0.1');
    expect(blackboxConfigFromEnv({ BBS_HOST: '0.0.0.0' }).host).toBe('0.0.0.0');
  });

  it('requires the bearer key on every route but /health', async () => {
    await boot({ apiKey: 'slot-key' });
    expect((await call('GET', '/health')).status).toBe(200);
    expect((await call('GET', '/v1/status')).status).toBe(401);
    expect((await call('GET', '/v1/status', undefined, { authorization: 'Bearer wrong' })).status).toBe(401);
    const refused = await register();
    expect(refused).toMatchObject({ status: 401, body: { error: 'unauthorized' } });
    expect((await call('GET', '/v1/status', undefined, { authorization: 'Bearer slot-key' })).status).toBe(
      200,
    );
    expect((await register({}, { authorization: 'Bearer slot-key' })).status).toBe(200);
  });

  it('reads the key from a file or the environment', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'bbs-key-')), 'key');
    writeFileSync(file, 'from-file\n');
    expect(blackboxApiKeyFromEnv({ BBS_API_KEY_FILE: file, BBS_API_KEY: 'env' })).toBe('from-file');
    expect(blackboxApiKeyFromEnv({ BBS_API_KEY: 'env' })).toBe('env');
    expect(blackboxApiKeyFromEnv({})).toBeUndefined();
    rmSync(file);
  });

  it('refuses execute_cmd outside a sandbox, and runs it when told it is inside one', async () => {
    await boot();
    const session = `access-${counter + 1}`;
    expect((await register()).status).toBe(200);
    const marker = join(workDir, 'ran.txt');
    const refused = await call('POST', `/v1/sessions/${session}/execute_cmd`, { cmd: `touch ${marker}` });
    expect(refused).toMatchObject({ status: 403, body: { error: 'forbidden' } });
    expect(existsSync(marker)).toBe(false);
    await server?.close();
    await boot({ config: { inside_sandbox: true } });
    const inside = `access-${counter + 1}`;
    expect((await register()).status).toBe(200);
    const ran = await call('POST', `/v1/sessions/${inside}/execute_cmd`, { cmd: 'echo inside' });
    expect(ran).toMatchObject({ status: 200, body: { stdout: 'inside\n', returncode: 0 } });
  });

  it('runs only registered backends, never an executable named by the request', async () => {
    await boot({ config: { inside_sandbox: true } });
    const marker = join(workDir, 'pwned.txt');
    const evil = join(workDir, 'evil.sh');
    writeFileSync(evil, `#!/bin/sh\ntouch ${marker}\n`);
    chmodSync(evil, 0o755);
    const named = await register({ blackbox_type: 'qwen_code', backend_options: { command: evil } });
    expect(named.status).toBe(400);
    expect(JSON.stringify(named.body)).toContain('command');
    const opencode = await register({ blackbox_type: 'opencode', backend_options: { command: evil } });
    expect(opencode.status).toBe(400);
    const path = await register({ blackbox_type: evil });
    expect(path).toMatchObject({ status: 400, body: { error: 'request_error' } });
    expect(existsSync(marker)).toBe(false);
  });

  it('reads a system prompt only from its own tree: no absolute escape, traversal or symlink out', async () => {
    await boot();
    const inside = join(workDir, 'prompt.txt');
    writeFileSync(inside, 'be brief');
    symlinkSync('/etc/passwd', join(workDir, 'link.txt'));
    for (const file of [
      '/etc/passwd',
      `${workDir}/../../etc/passwd`,
      join(workDir, 'link.txt'),
      'prompt.txt',
    ]) {
      const refused = await register({ system_prompt_file: file });
      expect(refused.status, file).toBe(400);
      expect(JSON.stringify(refused.body), file).toContain('system_prompt_file');
      expect(JSON.stringify(refused.body), file).not.toContain('root:x:0:0');
    }
    const outside = await register({ server_config: { runtime_root: '/etc/dressage-runtime' } });
    expect(outside.status).toBe(400);
    expect(JSON.stringify(outside.body)).toContain('runtime_root');
    const accepted = await register({ system_prompt_file: inside });
    expect(accepted.status).toBe(200);
  });

  it('keeps its LLM proxy to its own agent: other local processes cannot post into the trajectory', async () => {
    await boot();
    expect((await register()).status).toBe(200);
    const context = agent?.context;
    if (!context) throw new Error('the agent was not initialised');
    const before = model.requests.length;
    const chat = (headers: Record<string, string>) =>
      fetch(`${context.proxyOrigin}${context.apiPath}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'injected' }] }),
      });
    // What an agent in another sandbox on the same network would send: no key, or a guess.
    expect((await chat({})).status).toBe(401);
    expect((await chat({ authorization: 'Bearer dressage' })).status).toBe(401);
    expect((await chat({ 'x-api-key': 'dressage' })).status).toBe(401);
    expect((await fetch(`${context.proxyOrigin}${context.apiPath}/models`)).status).toBe(401);
    expect(model.requests.length).toBe(before);
    // The agent's own key passes (as a bearer token or an Anthropic-style x-api-key).
    expect((await chat({ authorization: `Bearer ${context.proxyApiKey}` })).status).toBe(200);
    expect((await chat({ 'x-api-key': context.proxyApiKey })).status).toBe(200);
    expect(model.requests.length).toBe(before + 2);
    expect(model.requests.at(-1)?.headers.authorization).toBeUndefined();
    expect(model.requests.at(-1)?.headers['x-api-key']).toBeUndefined();
  });

  it('answers malformed %-encoding with 400 and keeps serving', async () => {
    await boot();
    for (const path of ['/v1/sessions/%E0%A4%A', '/v1/sessions/s1/turns/%ZZ', '/v1/sessions/%']) {
      const response = await call('GET', path);
      expect(response.status, path).toBe(400);
      expect(response.body.error, path).toBe('request_error');
    }
    expect((await call('GET', '/health')).status).toBe(200);
  });

  it('answers unknown routes, and known paths with another method, with 404 not_found', async () => {
    await boot();
    for (const [method, path] of [
      ['GET', '/v1/nothing'],
      ['POST', '/v1/status'],
      ['GET', '/v1/sessions/s1/messages'],
      ['DELETE', '/v1/sessions/s1'],
      ['GET', '/v1/sessions/s1/turns/t1/cancel'],
    ] as const) {
      const response = await call(method, path);
      expect(response.status, `${method} ${path}`).toBe(404);
      expect(response.body, `${method} ${path}`).toMatchObject({
        error: 'not_found',
        message: `No route ${method} ${path}`,
      });
      expect(typeof response.body.request_id).toBe('string');
    }
    // Trailing slashes and a query do not change the route.
    expect((await call('GET', '/v1/status/?verbose=1')).status).toBe(200);
  });

  it('answers a body over the limit with 413 and keeps serving', async () => {
    await boot({ config: { max_request_bytes: 1024 } });
    const big = JSON.stringify({ cmd: 'x'.repeat(4096) });
    expect((await call('POST', '/v1/rollout/pause', big)).status).toBe(413);
    // A chunked body declares no length: the limit applies while reading.
    const chunked = await new Promise<number>((resolve, reject) => {
      const request = httpRequest(`${base}/v1/rollout/pause`, { method: 'POST' }, (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      });
      request.on('error', reject);
      for (let index = 0; index < 8; index++) request.write('x'.repeat(512));
      request.end();
    });
    expect(chunked).toBe(413);
    expect((await call('GET', '/health')).status).toBe(200);
  });
});
