// Blackbox throughput: trajectories per minute of N concurrent opencode agents, each in a sandbox of
// a blackbox pool, against a zero-delay scripted model; and, in the same run, a whitebox agent
// making the same model calls and running the same command in a sandbox of a command_only pool.
// Each trajectory: the task, a bash tool call (`echo ok > done.txt`) run in the sandbox, a final
// answer, then a check command in the sandbox. The ratio is the cost of driving an unmodified CLI
// through the BlackboxServer. One run; the last line is a JSON object of the headline figures.
//
//   BENCH_AGENTS=2 BENCH_ROUNDS=2 pnpm --filter @dressage/paddock bench
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createSample, type Sample } from '@dressage/protocol';
import { LocalBwrapProvider } from '@dressage/sandbox';
import { type Script, ScriptedModelServer } from '../src/__fixtures__/scripted-model.js';
import { agentInstallDir, agentPackages, ensureAgentInstalled } from '../src/adapters/agent-install.js';
import { blackboxSlotServer } from '../src/blackbox/slot-server.js';
import { createBlackboxGenerate } from '../src/paddock/blackbox-generate.js';
import {
  httpTrajectoryProxy,
  makeGenerate,
  PaddockWhiteboxAgent,
  type WhiteboxRunContext,
} from '../src/paddock/whitebox.js';

type Json = Record<string, unknown>;

const agents = Number(process.env.BENCH_AGENTS ?? 2);
const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
const trajectories = agents * rounds;
const command = 'echo ok > done.txt';
const check = 'test "$(cat /workspace/done.txt)" = ok';
const round = (value: number) => Math.round(value * 1000) / 1000;

// The model: a bash call first, a final answer once it sees the tool's result. No delay.
const script: Script = (request) => {
  const last = (request.messages as Json[]).at(-1) as Json;
  if (last.role === 'tool') return { content: 'Done.' };
  return {
    content: '',
    tool_calls: [{ name: 'bash', arguments: { command, description: 'Write the file' } }],
  };
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

/** Runs `count` samples through `generate`, `agents` at a time; returns seconds and successes. */
async function drive(
  count: number,
  generate: (sample: Sample) => Promise<Sample[]>,
  passed: (sample: Sample) => boolean,
) {
  let next = 0;
  let succeeded = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: agents }, async () => {
      while (next < count) {
        const [sample] = await generate(task(next++));
        if (sample !== undefined && passed(sample)) succeeded += 1;
      }
    }),
  );
  return { count, seconds: (performance.now() - started) / 1000, succeeded };
}

const base = mkdtempSync(join(tmpdir(), 'paddock-blackbox-bench-'));
const model = new ScriptedModelServer(script);
await model.start();
const proxy = httpTrajectoryProxy(model.url);
const bin = await ensureAgentInstalled(agentPackages.opencode);

// Blackbox: opencode in a network-isolated slot, its model calls through the slot's LLM proxy and
// the pool's gate; bash its only tool.
const blackboxProvider = new LocalBwrapProvider({
  slots: agents,
  mode: 'blackbox',
  server: blackboxSlotServer(),
  baseDir: join(base, 'blackbox'),
  upstreamUrl: model.url,
  extraReadOnlyMounts: [agentInstallDir(agentPackages.opencode)],
  env: { DRESSAGE_OPENCODE_BIN: bin, PATH: `${dirname(bin)}:/usr/local/bin:/usr/bin:/bin` },
  healthIntervalSeconds: 0,
});
await blackboxProvider.pool.start();
const blackboxGenerate = createBlackboxGenerate({
  provider: blackboxProvider,
  proxy,
  proxyUrl: model.url,
  blackboxType: 'opencode',
  backendOptions: { permission: { '*': 'deny', bash: 'allow' }, proxy: { max_steps: 8 } },
});
const checked = (sample: Sample) =>
  sample.status === 'completed' &&
  ((sample.metadata.execute_cmds as Json[] | undefined) ?? []).some((result) => result.returncode === 0);
const blackbox = await drive(trajectories, blackboxGenerate, checked);
await blackboxProvider.close();

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
    const messages: Json[] = [{ role: 'user', content: String(sample.prompt) }];
    for (let step = 0; step < 4; step++) {
      const reply = (await context.chat({ model: 'm', messages, stream: false })) as {
        choices: { message: Json }[];
      };
      const message = reply.choices[0]?.message as Json;
      messages.push(message);
      const calls = (message.tool_calls as Json[] | undefined) ?? [];
      if (calls.length === 0) {
        const [, result] = await this.tools.toolCall('shell.exec', { command: check });
        context.metadata.check_passed = (result as { returncode?: number }).returncode === 0;
        return String(message.content);
      }
      for (const call of calls) {
        const args = JSON.parse(String((call.function as Json).arguments)) as Json;
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
await whiteboxProvider.close();
await model.close();
rmSync(base, { recursive: true, force: true });

const perMinute = (run: { count: number; seconds: number }) => (run.count / run.seconds) * 60;
const perTrajectory = (run: { count: number; seconds: number }) => run.seconds / run.count;
console.log(`${agents} concurrent agents, zero-delay model`);
console.log(
  `blackbox (opencode ${agentPackages.opencode.version}, BlackboxServer, bwrap): ${round(perMinute(blackbox))} trajectories/min, ${blackbox.succeeded}/${blackbox.count} checked`,
);
console.log(
  `whitebox (same calls and command, bwrap): ${round(perMinute(whitebox))} trajectories/min, ${whitebox.succeeded}/${whitebox.count} checked`,
);
const ratio = perTrajectory(blackbox) / perTrajectory(whitebox);
console.log(`blackbox cost: ${round(ratio)}x the whitebox time per trajectory`);
console.log(
  JSON.stringify({
    agents,
    blackbox_trajectories: blackbox.count,
    whitebox_trajectories: whitebox.count,
    blackbox_trajectories_per_minute: round(perMinute(blackbox)),
    whitebox_trajectories_per_minute: round(perMinute(whitebox)),
    blackbox_over_whitebox_time: round(ratio),
    blackbox_checked: blackbox.succeeded,
    whitebox_checked: whitebox.succeeded,
  }),
);
