// Blackbox throughput: trajectories per minute of N concurrent agents of each adapter, each in a
// sandbox of a blackbox pool, against a zero-delay scripted model, cold (the slot server and agent
// started for every sample, as a slot server without a recycle route is) and warm (the server and
// the agent kept between samples; one untimed round first starts them); and, in the same run, a
// whitebox agent making the same model calls and running the same command in a sandbox of a
// command_only pool. Each trajectory: the task, a shell tool call (`echo ok > done.txt`) run in
// the sandbox, a final answer, then a check command in the sandbox. The ratio is the cost of
// driving an unmodified CLI through the BlackboxServer. One run; the last line is a JSON object.
//
//   BENCH_AGENTS=2 BENCH_ROUNDS=2 BENCH_ADAPTERS=opencode,codex pnpm --filter @dressage/paddock bench
//
// `BENCH_MODES=warm` measures only the warm slots (default `cold,warm`).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ChatMessage, createSample, type Sample } from '@dressage/protocol';
import { LocalBwrapProvider, type SandboxSpec } from '@dressage/sandbox';
import { findFreePortRange } from '@dressage/sandbox/internal';
import { type Script, ScriptedModelServer } from '../src/__fixtures__/scripted-model.js';
import {
  agentBinDirectories,
  agentInstallDir,
  agentPackages,
  ensureAgentInstalled,
} from '../src/adapters/agent-install.js';
import { builtinAdapterExecutableVariables } from '../src/adapters/index.js';
import { blackboxSlotServer } from '../src/blackbox/slot-server.js';
import { createBlackboxGenerate } from '../src/paddock/blackbox-generate.js';
import { httpTrajectoryProxy } from '../src/paddock/trajectory-proxy.js';
import { makeGenerate, PaddockWhiteboxAgent, type WhiteboxRunContext } from '../src/paddock/whitebox.js';

type Json = Record<string, unknown>;

const agents = Number(process.env.BENCH_AGENTS ?? 2);
const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
const trajectories = agents * rounds;
const adapters = (process.env.BENCH_ADAPTERS ?? 'opencode,qwen_code,claude_code,codex,openclaw')
  .split(',')
  .map((name) => name.trim())
  .filter(Boolean) as (keyof typeof builtinAdapterExecutableVariables)[];
const modes = (process.env.BENCH_MODES ?? 'cold,warm')
  .split(',')
  .map((mode) => mode.trim())
  .filter((mode): mode is 'cold' | 'warm' => mode === 'cold' || mode === 'warm');
if (modes.length === 0) throw new Error('BENCH_MODES names neither cold nor warm');
const command = 'echo ok > done.txt';
const check = 'test "$(cat /workspace/done.txt)" = ok';
const round = (value: number) => Math.round(value * 1000) / 1000;

// When each blackbox session's first and last model request arrived (for the phase breakdown).
const modelTimes = new Map<string, { first: number; last: number }>();
// Each CLI's shell tool and the arguments it takes.
const shellCalls: Record<string, Json> = {
  bash: { command, description: 'Write the file' },
  run_shell_command: { command },
  Bash: { command, description: 'Write the file' },
  shell: { command: ['bash', '-lc', command] },
  exec_command: { cmd: command },
  exec: { command },
};
// The model: a call of the agent's shell tool first, a final answer once it sees the tool's result.
// No delay.
const script: Script = (request, { headers }) => {
  const session = String(headers['x-session-id'] ?? '');
  const now = performance.now();
  const times = modelTimes.get(session);
  if (times) times.last = now;
  else modelTimes.set(session, { first: now, last: now });
  const last = (request.messages as Json[]).at(-1) as Json;
  if (last.role === 'tool') return { content: 'Done.' };
  const tools = ((request.tools as Json[] | undefined) ?? []).map((tool) =>
    String((tool.function as Json | undefined)?.name ?? tool.name),
  );
  const shell = tools.find((name) => name in shellCalls) ?? 'bash';
  return { content: '', tool_calls: [{ name: shell, arguments: shellCalls[shell] as Json }] };
};

function task(index: number): Sample {
  return createSample({
    index,
    group_index: index,
    prompt: 'Write ok into done.txt.',
    metadata: {
      instance_id: `bench-${index}`,
      blackbox_execute_cmds: { after_agent: [{ name: 'check', cmd: check }] },
    },
  });
}

/** Milliseconds of one blackbox sample, by phase. */
interface Phases {
  acquire: number;
  toFirstModelCall: number;
  agentLoop: number;
  afterLastModelCall: number;
}

/** Runs `count` samples through `generate`, `agents` at a time; returns seconds, successes and phases. */
async function drive(
  count: number,
  generate: (sample: Sample) => Promise<Sample[]>,
  passed: (sample: Sample) => boolean,
  acquired?: Map<string, { start: number; end: number }>,
) {
  let next = 0;
  let succeeded = 0;
  const phases: Phases[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: agents }, async () => {
      while (next < count) {
        const start = performance.now();
        const [sample] = await generate(task(next++));
        const end = performance.now();
        if (sample !== undefined && passed(sample)) succeeded += 1;
        const session = String(sample?.session_id ?? '');
        const lease = acquired?.get(session);
        const times = modelTimes.get(session);
        if (lease && times)
          phases.push({
            acquire: lease.end - start,
            toFirstModelCall: times.first - lease.end,
            agentLoop: times.last - times.first,
            afterLastModelCall: end - times.last,
          });
      }
    }),
  );
  const mean = (key: keyof Phases) =>
    phases.length === 0
      ? null
      : round(phases.reduce((sum, phase) => sum + phase[key], 0) / phases.length / 1000);
  return {
    count,
    seconds: (performance.now() - started) / 1000,
    succeeded,
    phases: {
      acquire_s: mean('acquire'),
      to_first_model_call_s: mean('toFirstModelCall'),
      agent_loop_s: mean('agentLoop'),
      after_last_model_call_s: mean('afterLastModelCall'),
    },
  };
}

// A pool that cannot remove its directories (EBUSY on a slot's tmpfs as root) has measured all the
// same: say so, and keep the figures.
const cleanupFailed = (error: unknown) => console.warn(`cleanup failed: ${String(error)}`);

const base = mkdtempSync(join(tmpdir(), 'paddock-blackbox-bench-'));
const model = new ScriptedModelServer(script);
await model.start();
const proxy = httpTrajectoryProxy(model.url);
const checked = (sample: Sample) =>
  sample.status === 'completed' &&
  ((sample.metadata.execute_cmds as Json[] | undefined) ?? []).some((result) => result.returncode === 0);
// Only bash among opencode's tools (a shorter prompt); the others take their defaults.
const backendOptionsOf: Partial<Record<string, Json>> = {
  opencode: { permission: { '*': 'deny', bash: 'allow' } },
};

// One adapter, cold or warm: agents in network-isolated slots, their model calls through the slot's
// LLM proxy and the pool's gate.
async function blackboxRun(type: keyof typeof builtinAdapterExecutableVariables, warm: boolean) {
  const agent = agentPackages[type];
  const bin = await ensureAgentInstalled(agent);
  const { recyclePath: _recycle, ...coldServer } = blackboxSlotServer();
  const provider = new LocalBwrapProvider({
    slots: agents,
    mode: 'blackbox',
    // Free ports of this moment: other pools on the machine may hold the default ones.
    basePort: await findFreePortRange(agents),
    server: warm ? blackboxSlotServer() : coldServer,
    baseDir: join(base, `blackbox-${type}-${warm ? 'warm' : 'cold'}`),
    upstreamUrl: model.url,
    extraReadOnlyMounts: [agentInstallDir(agent)],
    env: {
      [builtinAdapterExecutableVariables[type]]: bin,
      // The CLI's own Node first, where it brings one (OpenClaw).
      PATH: [...agentBinDirectories(agent), '/usr/local/bin', '/usr/bin', '/bin'].join(':'),
    },
    healthIntervalSeconds: 0,
  });
  await provider.pool.start();
  // The lease wait of each sample (a warm slot is leased once its recycle is done).
  const acquired = new Map<string, { start: number; end: number }>();
  const timed = new Proxy(provider, {
    get(target, property, receiver) {
      if (property === 'create')
        return async (spec: SandboxSpec) => {
          const start = performance.now();
          const lease = await target.create(spec);
          acquired.set(String(spec.sessionId ?? spec.trajectoryId), { start, end: performance.now() });
          return lease;
        };
      const value = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const generate = createBlackboxGenerate({
    provider: timed,
    proxy,
    proxyUrl: model.url,
    blackboxType: type,
    backendOptions: { ...backendOptionsOf[type], proxy: { max_steps: 8 } },
  });
  // Warm: one untimed sample per slot starts each slot's agent.
  if (warm) await drive(agents, generate, checked);
  const run = await drive(trajectories, generate, checked, acquired);
  await provider.close().catch(cleanupFailed);
  return { ...run, version: agent.version };
}

const blackbox: Record<
  string,
  Partial<Record<'cold' | 'warm', Awaited<ReturnType<typeof blackboxRun>>>>
> = {};
for (const type of adapters) {
  blackbox[type] = {};
  for (const mode of modes) blackbox[type][mode] = await blackboxRun(type, mode === 'warm');
}

// Whitebox: the same two model calls, made by the agent itself, and the same command and check
// run in a sandbox of a command_only pool.
const whiteboxProvider = new LocalBwrapProvider({
  slots: agents,
  baseDir: join(base, 'whitebox'),
  unshareNet: true,
  healthIntervalSeconds: 0,
});
await whiteboxProvider.pool.start();
class ScriptedShellAgent extends PaddockWhiteboxAgent {
  async run(sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
    const messages: ChatMessage[] = [{ role: 'user', content: String(sample.prompt) }];
    for (let step = 0; step < 4; step++) {
      const reply = await context.chat({ model: 'm', messages, stream: false });
      const message = reply.choices[0]!.message;
      messages.push(message);
      const calls = message.tool_calls ?? [];
      if (calls.length === 0) {
        const [, result] = await this.tools.toolCall('shell.exec', { command: check });
        context.metadata.check_passed = (result as { returncode?: number }).returncode === 0;
        return String(message.content);
      }
      for (const call of calls) {
        const args = JSON.parse(call.function.arguments) as Json;
        const [output] = await this.tools.toolCall('shell.exec', { command: String(args.command) });
        messages.push({ role: 'tool', tool_call_id: call.id, content: output });
      }
    }
    return null;
  }
}
const whiteboxGenerate = makeGenerate(ScriptedShellAgent, {
  proxy,
  proxyUrl: model.url,
  provider: whiteboxProvider,
});
// Ten times as many: a whitebox trajectory is short, and a handful would be mostly noise.
const whitebox = await drive(
  trajectories * 10,
  (sample) => whiteboxGenerate(sample),
  (sample) => sample.status === 'completed' && sample.metadata.check_passed === true,
);
await whiteboxProvider.close().catch(cleanupFailed);
await model.close();
try {
  rmSync(base, { recursive: true, force: true });
} catch (error) {
  cleanupFailed(error);
}

const perMinute = (run: { count: number; seconds: number }) => (run.count / run.seconds) * 60;
const perTrajectory = (run: { count: number; seconds: number }) => run.seconds / run.count;
console.log(`${agents} concurrent agents, zero-delay model`);
console.log(
  `whitebox (same calls and command, bwrap): ${round(perMinute(whitebox))} trajectories/min, ${whitebox.succeeded}/${whitebox.count} checked`,
);
const figures: Record<string, Json> = {};
for (const [type, runs] of Object.entries(blackbox)) {
  const entry: Json = {};
  for (const mode of modes) {
    const run = runs[mode]!;
    entry.version = run.version;
    const ratio = perTrajectory(run) / perTrajectory(whitebox);
    console.log(
      `${type} ${run.version} ${mode}: ${round(perMinute(run))} trajectories/min, ${round(perTrajectory(run))} s each, ${run.succeeded}/${run.count} checked, ${round(ratio)}x the whitebox time per trajectory`,
    );
    console.log(`  mean seconds per sample: ${JSON.stringify(run.phases)}`);
    entry[mode] = {
      trajectories: run.count,
      trajectories_per_minute: round(perMinute(run)),
      seconds_per_trajectory: round(perTrajectory(run)),
      over_whitebox_time: round(ratio),
      checked: run.succeeded,
      mean_phases: run.phases,
    };
  }
  figures[type] = entry;
}
console.log(
  JSON.stringify({
    agents,
    whitebox_trajectories: whitebox.count,
    whitebox_trajectories_per_minute: round(perMinute(whitebox)),
    whitebox_checked: whitebox.succeeded,
    blackbox: figures,
  }),
);
