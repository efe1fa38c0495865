// The BlackboxServer keeps an agent that can recycle between samples, within its budgets, and
// starts it anew otherwise; the settings come from the registration, else BBS_*, else defaults.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ScriptAgentAdapter } from '../__fixtures__/script-agent.js';
import { ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import type { AdapterContext } from './adapter.js';
import { type BlackboxServerConfig, blackboxConfigFromEnv, defaultBlackboxConfig } from './config.js';
import { BlackboxServer } from './server.js';

type Json = Record<string, unknown>;

/** The scripted agent, made recyclable; one process (a `sleep`) stands in for its process group. */
class RecyclingAgent extends ScriptAgentAdapter {
  recycles = 0;
  closed = false;
  readonly child: ChildProcess = spawn('sleep', ['600'], { detached: true, stdio: 'ignore' });

  async recycle(): Promise<void> {
    this.recycles += 1;
  }

  async rebind(context: AdapterContext): Promise<void> {
    this.context = context;
  }

  processGroups(): number[] {
    return [this.child.pid as number];
  }

  override async close(): Promise<void> {
    this.closed = true;
    this.child.kill('SIGKILL');
  }
}

describe('agent reuse between samples', () => {
  let model: ScriptedModelServer;
  let workDir: string;
  let server: BlackboxServer | null = null;
  let base: string;
  let agents: RecyclingAgent[] = [];
  let counter = 0;

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
    for (const agent of agents) agent.child.kill('SIGKILL');
    agents = [];
    rmSync(workDir, { recursive: true, force: true });
  });

  async function boot(config: Partial<BlackboxServerConfig> = {}) {
    workDir = mkdtempSync(join(tmpdir(), 'bbs-reuse-'));
    server = new BlackboxServer({
      config: { port: 0, runtime_root: join(workDir, '.runtime'), inside_sandbox: true, ...config },
      workDir,
      adapters: {
        script_agent: () => {
          const agent = new RecyclingAgent();
          agents.push(agent);
          return agent;
        },
      },
    });
    base = await server.listen();
  }

  async function call(method: string, path: string, body?: unknown) {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: body === undefined ? undefined : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Json };
  }

  /** One sample: register, one turn, then the recycle a pool sends when the lease ends. */
  async function sample(serverConfig?: Json) {
    counter += 1;
    const session = `bbs-reuse-${counter}`;
    const registered = await call('POST', '/v1/rollout/register', {
      blackbox_type: 'script_agent',
      router: model.url,
      bound_session_id: session,
      bound_instance_id: `instance-${counter}`,
      ...(serverConfig ? { server_config: serverConfig } : {}),
    });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    const turn = await call('POST', `/v1/sessions/${session}/messages`, {
      mode: 'sync',
      messages: [{ role: 'user', content: `hello ${counter}` }],
    });
    expect(turn.status, JSON.stringify(turn.body)).toBe(200);
    const recycled = await call('POST', '/v1/rollout/recycle');
    expect(recycled.status).toBe(200);
    return { session, recycled: recycled.body };
  }

  it('keeps the agent by default and attributes each sample to its own session', async () => {
    await boot();
    const first = await sample();
    expect(first.recycled).toMatchObject({ kept: true, reason: null });
    const second = await sample();
    expect(agents).toHaveLength(1);
    expect(agents[0]?.recycles).toBe(2);
    expect(agents[0]?.closed).toBe(false);
    const sessions = model.requests.slice(-2).map((request) => request.headers['x-session-id']);
    expect(sessions).toEqual([first.session, second.session]);
    const status = await call('GET', '/v1/status');
    expect(status.body).toMatchObject({ status: 'idle', binding: null });
  });

  it('starts the agent per sample when agent_reuse is off', async () => {
    await boot({ agent_reuse: false });
    const first = await sample();
    expect(first.recycled).toMatchObject({ kept: false, reason: 'agent_reuse is off' });
    await sample();
    expect(agents).toHaveLength(2);
    expect(agents[0]?.closed).toBe(true);
    expect(agents[0]?.recycles).toBe(0);
  });

  it('takes agent_reuse from the registration over the server setting', async () => {
    await boot({ agent_reuse: false });
    expect((await sample({ agent_reuse: true })).recycled).toMatchObject({ kept: true });
    await sample({ agent_reuse: true });
    expect(agents).toHaveLength(1);
  });

  it('restarts after agent_max_samples samples', async () => {
    await boot({ agent_max_samples: 2 });
    expect((await sample()).recycled).toMatchObject({ kept: true });
    expect((await sample()).recycled).toMatchObject({
      kept: false,
      reason: expect.stringContaining('agent_max_samples (2)'),
    });
    await sample();
    expect(agents).toHaveLength(2);
  });

  it('restarts after agent_max_age seconds', async () => {
    await boot({ agent_max_age: 0.001 });
    expect((await sample()).recycled).toMatchObject({
      kept: false,
      reason: expect.stringContaining('agent_max_age'),
    });
  });

  it('restarts when its processes hold more than agent_max_rss_mb', async () => {
    await boot({ agent_max_rss_mb: 0.01 });
    expect((await sample()).recycled).toMatchObject({
      kept: false,
      reason: expect.stringMatching(/holds \d+ MiB, over agent_max_rss_mb \(0\.01\)/),
    });
    expect(agents[0]?.closed).toBe(true);
  });

  it('restarts an agent that stopped answering while it waited for the next sample', async () => {
    await boot();
    expect((await sample()).recycled).toMatchObject({ kept: true });
    (agents[0] as RecyclingAgent).healthy = false;
    await sample();
    expect(agents).toHaveLength(2);
    expect(agents[0]?.closed).toBe(true);
  });

  it('reads the settings from BBS_* and falls back to the defaults', () => {
    expect(defaultBlackboxConfig).toMatchObject({
      agent_reuse: true,
      agent_max_samples: 100,
      agent_max_age: 3600,
      agent_max_rss_mb: 2048,
    });
    expect(blackboxConfigFromEnv({})).toMatchObject({
      agent_reuse: true,
      agent_max_samples: 100,
      agent_max_age: 3600,
      agent_max_rss_mb: 2048,
    });
    expect(
      blackboxConfigFromEnv({
        BBS_AGENT_REUSE: 'false',
        BBS_AGENT_MAX_SAMPLES: '7',
        BBS_AGENT_MAX_AGE: '60',
        BBS_AGENT_MAX_RSS_MB: '512',
      }),
    ).toMatchObject({ agent_reuse: false, agent_max_samples: 7, agent_max_age: 60, agent_max_rss_mb: 512 });
    expect(blackboxConfigFromEnv({ BBS_AGENT_REUSE: '1' }).agent_reuse).toBe(true);
    expect(() => blackboxConfigFromEnv({ BBS_AGENT_REUSE: 'maybe' })).toThrow(/BBS_AGENT_REUSE=maybe/);
  });
});
