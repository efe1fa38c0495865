// Real agent CLIs from npm, each inside a bubblewrap slot running dressage-blackbox-server, against a
// scripted OpenAI-compatible model that records the trajectory like the Dressage proxy.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { expandSegmentsToSamples } from '@dressage/multi-segment';
import { createSample, trajectoryReadShapeSchema } from '@dressage/protocol';
import { LocalBwrapPool } from '@dressage/sandbox';
import { findFreePortRange } from '@dressage/sandbox/internal';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Script, ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import { blackboxSlotServer } from '../blackbox/slot-server.js';
import { type AgentPackage, agentInstallDir, agentPackages, ensureAgentInstalled } from './agent-install.js';

type Json = Record<string, unknown>;

// Asks the agent's own shell tool to write a file, then answers in text once it sees the result.
const script: Script = (request) => {
  const messages = request.messages as Json[];
  const last = messages.at(-1) as Json;
  const tools = ((request.tools as Json[] | undefined) ?? []).map((tool) =>
    String((tool.function as Json).name),
  );
  const shell = tools.find((name) => ['run_shell_command', 'bash', 'shell'].includes(name));
  if (last.role === 'tool') return { content: 'The file is written.' };
  const user = typeof last.content === 'string' ? last.content : JSON.stringify(last.content ?? '');
  if (shell && user.includes('proof.txt')) {
    const command = 'echo sandboxed-proof > proof.txt && cat proof.txt';
    return {
      content: '',
      tool_calls: [
        {
          name: shell,
          arguments: shell === 'bash' ? { command, description: 'write the file' } : { command },
        },
      ],
    };
  }
  return { content: 'ok' };
};

const agents: [string, AgentPackage, Json][] = [
  ['qwen_code', agentPackages.qwen_code, {}],
  ['opencode', agentPackages.opencode, {}],
];

describe.each(agents)('%s in a bubblewrap slot', (type, agent, options) => {
  let model: ScriptedModelServer;
  let pool: LocalBwrapPool;
  let baseDir: string;
  let bin: string | null = null;
  let skipReason: string | null = null;

  beforeAll(async () => {
    try {
      bin = await ensureAgentInstalled(agent, { timeoutMs: 720_000 });
    } catch (error) {
      skipReason = `cannot install ${agent.name}: ${String(error)}`;
      console.warn(`[paddock] skipping ${type}: ${skipReason}`);
      return;
    }
    model = new ScriptedModelServer(script);
    await model.start();
    baseDir = mkdtempSync(join(tmpdir(), `paddock-${type}-`));
    pool = new LocalBwrapPool({
      slots: 1,
      mode: 'blackbox',
      server: blackboxSlotServer(),
      baseDir,
      basePort: await findFreePortRange(1),
      // The slot has its own network namespace: its LLM proxy reaches the model only through the
      // pool's pipe to this address.
      upstreamUrl: model.url,
      healthIntervalSeconds: 0,
      extraReadOnlyMounts: [agentInstallDir(agent)],
      env: {
        DRESSAGE_QWEN_CODE_BIN: type === 'qwen_code' ? (bin as string) : '',
        DRESSAGE_OPENCODE_BIN: type === 'opencode' ? (bin as string) : '',
        PATH: `${dirname(bin as string)}:/usr/local/bin:/usr/bin:/bin`,
      },
    });
    await pool.start();
  }, 900_000);

  afterAll(async () => {
    await pool?.stop();
    await model?.close();
    if (baseDir) rmSync(baseDir, { recursive: true, force: true });
  });

  it('runs a tool-using task; the trajectory masks tool results and trains model tokens', async (context) => {
    if (skipReason !== null) context.skip();
    const session = `bbs-${type}`;
    // The slot's upstream records under this session only.
    const lease = await pool.acquire(`traj-${type}`, { sessionId: session });
    const call = async (method: string, path: string, body?: unknown) => {
      const response = await fetch(`${lease.sandboxUrl}${path}`, {
        method,
        headers: { ...lease.headers, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: response.status, body: (await response.json()) as Json };
    };
    const registered = await call('POST', '/v1/rollout/register', {
      blackbox_type: type,
      router: model.url,
      bound_session_id: session,
      bound_instance_id: 'task-1',
      backend_options: { ...options, proxy: { max_steps: 20 } },
    });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    const turn = await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 'turn-1',
      mode: 'async',
      messages: [
        { role: 'user', content: 'Create proof.txt in the current directory containing sandboxed-proof.' },
      ],
    });
    expect(turn.status).toBe(202);
    let status: Json = {};
    for (let poll = 0; poll < 20; poll++) {
      status = (await call('GET', `/v1/sessions/${session}/turns/turn-1?wait=30`)).body;
      if (!['queued', 'inflight'].includes(String(status.status))) break;
    }
    expect(status.status, JSON.stringify(status)).toBe('committed');
    const outputs = status.outputs as Json[];
    expect(
      outputs.some(
        (message) => message.role === 'tool' && String(message.content).includes('sandboxed-proof'),
      ),
    ).toBe(true);

    // The file exists in the sandbox's work dir, written by the agent's own tool.
    const check = await call('POST', `/v1/sessions/${session}/execute_cmd`, {
      cmd: 'cat /workspace/proof.txt; id -u',
    });
    // As root the slot runs as its unprivileged host uid, else as uid 1000 of a user namespace.
    const uid = pool.hostIdentityOf(lease.slotId)?.uid ?? 1000;
    expect(check.body).toMatchObject({ stdout: `sandboxed-proof\n${uid}\n`, returncode: 0 });

    // Every model request carried the bound session and turn.
    const requests = model.requests.filter((request) => request.headers['x-session-id'] === session);
    expect(requests.length).toBeGreaterThanOrEqual(2);
    expect(requests.every((request) => request.headers['x-turn-id'] === 'turn-1')).toBe(true);

    await fetch(`${model.url}/session/finalize`, {
      method: 'POST',
      body: JSON.stringify({ session_id: session }),
    });
    const read = trajectoryReadShapeSchema.parse(
      await (
        await fetch(`${model.url}/trajectory/read`, {
          method: 'POST',
          body: JSON.stringify({ trajectory_id: session, drain: true }),
        })
      ).json(),
    );
    if (read.mode !== 'trajectory') throw new Error(`expected mode trajectory, got ${read.mode}`);
    const segment = read.data[0];
    expect(segment?.messages.map((message) => message.role)).toContain('tool');
    const samples = expandSegmentsToSamples(
      createSample({ index: 0, group_index: 0, session_id: session, metadata: { instance_id: 'task-1' } }),
      read.data,
    );
    const sample = samples[0];
    expect(sample).toBeDefined();
    const text = String.fromCodePoint(...(sample?.tokens ?? []));
    const start = (sample?.tokens.length ?? 0) - (sample?.response_length ?? 0);
    const toolText = text.indexOf('<tool>');
    expect(toolText).toBeGreaterThan(start);
    // Tool output is context (mask 0); the model's reply is trained (mask 1).
    expect(sample?.loss_mask?.[toolText - start]).toBe(0);
    const reply = text.lastIndexOf('The file is written.');
    expect(sample?.loss_mask?.[reply - start]).toBe(1);
    await pool.release(lease);
  }, 300_000);
});
