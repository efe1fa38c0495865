// Kept agents in a real bwrap slot (`opencode serve`, `qwen --acp`, `codex app-server`) stay up between the samples of
// their slot, and the next sample sees nothing of the last one: no files, no agent session or
// history, no memory, no environment, no process; each sample's model calls land in its own
// trajectory; a crashed agent is started anew.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createSample, type Sample } from '@dressage/protocol';
import { LocalBwrapProvider } from '@dressage/sandbox';
import { findFreePortRange } from '@dressage/sandbox/internal';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Script, ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import { agentInstallDir, agentPackages, ensureAgentInstalled } from '../adapters/agent-install.js';
import { createBlackboxGenerate } from '../paddock/blackbox-generate.js';
import { httpTrajectoryProxy } from '../paddock/trajectory-proxy.js';
import { blackboxSlotServer } from './slot-server.js';

type Json = Record<string, unknown>;

// Sample A leaves a trace everywhere it can; sample B looks for it. The marker is split in the
// commands so that only what they find can contain it whole.
const plant = [
  'echo SECRET""_A > /workspace/a.txt',
  'echo SECRET""_A > /tmp/a.txt',
  'echo SECRET""_A > "$HOME/a.txt"',
  'echo "export LEAK=SECRET""_A" >> "$HOME/.profile"',
  'echo "export LEAK=SECRET""_A" >> "$HOME/.bashrc"',
  'mkdir -p "$HOME/.config/opencode" "$HOME/.qwen" "$HOME/.codex"',
  'echo "remember SECRET""_A" > "$HOME/.config/opencode/AGENTS.md"',
  'echo "remember SECRET""_A" > "$HOME/.qwen/QWEN.md"',
  'echo "remember SECRET""_A" > "$HOME/.codex/AGENTS.md"',
  'export LEAK=SECRET""_A',
  // Braces: `&;` would be a syntax error, and the shell would run none of the line.
  '{ nohup sleep 600 >/dev/null 2>&1 & }',
  // Split too: a shell that refused the line would print it, "planted" included.
  'echo plant""ed',
].join('; ');
const look = [
  'echo look""ed',
  'echo "LEAK=$LEAK"',
  'ls -A /workspace /tmp "$HOME" /workspace_sandbox/blackbox_server_runtime',
  'grep -rl "SECRET""_A" /workspace /tmp "$HOME" /workspace_sandbox /home 2>/dev/null',
  'for p in /proc/[0-9]*; do tr "\\0" " " < $p/cmdline 2>/dev/null; echo; done | grep "[s]leep 600"',
  '/bin/sh -lc "echo login LEAK=\\$LEAK"',
  'true',
].join('; ');

const script: Script = (request) => {
  const messages = request.messages as Json[];
  // Answered once the tool ran (Codex may add a message after its result: an AGENTS.md it saw change).
  const result = messages.findLast((message) => message.role === 'tool');
  if (result !== undefined) return { content: `Done: ${String(result.content)}` };
  const task = JSON.stringify(messages);
  const command = task.includes('plant the traces') ? plant : look;
  const tools = ((request.tools as Json[] | undefined) ?? []).map((tool) =>
    String((tool.function as Json).name),
  );
  if (tools.includes('run_shell_command'))
    return { content: '', tool_calls: [{ name: 'run_shell_command', arguments: { command } }] };
  if (tools.includes('exec_command'))
    return { content: '', tool_calls: [{ name: 'exec_command', arguments: { cmd: command } }] };
  return { content: '', tool_calls: [{ name: 'bash', arguments: { command, description: 'Run' } }] };
};

const sample = (index: number, prompt: string): Sample =>
  createSample({ index, group_index: index, prompt, metadata: { instance_id: `warm-${index}` } });

/** The host pids of the processes whose command line matches `pattern` and whose environment holds `marker`. */
function pidsOf(pattern: RegExp, marker: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc').filter((entry) => /^\d+$/.test(entry))) {
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'latin1').split('\0').join(' ');
      if (!pattern.test(cmdline)) continue;
      if (!readFileSync(`/proc/${name}/environ`, 'latin1').split('\0').includes(marker)) continue;
      pids.push(Number(name));
    } catch {
      // Gone, or not ours to read.
    }
  }
  return pids;
}

const kept = [
  {
    type: 'opencode',
    agent: agentPackages.opencode,
    variable: 'DRESSAGE_OPENCODE_BIN',
    options: { permission: { '*': 'deny', bash: 'allow' } },
  },
  { type: 'qwen_code', agent: agentPackages.qwen_code, variable: 'DRESSAGE_QWEN_CODE_BIN', options: {} },
  { type: 'codex', agent: agentPackages.codex, variable: 'DRESSAGE_CODEX_BIN', options: {} },
] as const;

describe.each(kept)('a kept $type agent', ({ type, agent, variable, options }) => {
  let baseDir: string;
  let model: ScriptedModelServer;
  let provider: LocalBwrapProvider;
  let generate: (sample: Sample) => Promise<Sample[]>;
  let skipReason: string | null = null;
  let port = 0;

  beforeAll(async () => {
    let bin: string;
    try {
      bin = await ensureAgentInstalled(agent, { timeoutMs: 720_000 });
    } catch (error) {
      skipReason = `cannot install ${agent.name}: ${String(error)}`;
      console.warn(`[paddock] skipping: ${skipReason}`);
      return;
    }
    baseDir = mkdtempSync(join(tmpdir(), `paddock-warm-${type}-`));
    model = new ScriptedModelServer(script);
    await model.start();
    port = await findFreePortRange(1);
    provider = new LocalBwrapProvider({
      slots: 1,
      mode: 'blackbox',
      server: blackboxSlotServer(),
      baseDir: join(baseDir, 'pool'),
      basePort: port,
      upstreamUrl: model.url,
      extraReadOnlyMounts: [agentInstallDir(agent)],
      env: { [variable]: bin, PATH: `${dirname(bin)}:/usr/local/bin:/usr/bin:/bin` },
      healthIntervalSeconds: 0,
    });
    await provider.pool.start();
    generate = createBlackboxGenerate({
      provider,
      proxy: httpTrajectoryProxy(model.url),
      proxyUrl: model.url,
      blackboxType: type,
      backendOptions: { ...options, proxy: { max_steps: 8 } },
    });
  }, 900_000);
  afterAll(async () => {
    await provider?.close();
    await model?.close();
    if (baseDir) rmSync(baseDir, { recursive: true, force: true });
  });

  // The agent's process group leaders: children of the slot's server that run the agent's CLI.
  const agents = () => {
    const servers = pidsOf(/dressage-blackbox-server/, `BBS_PORT=${port}`);
    return readdirSync('/proc')
      .filter((entry) => /^\d+$/.test(entry))
      .filter((pid) => {
        try {
          const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
          const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
          return servers.includes(ppid) && readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes(agent.bin);
        } catch {
          return false;
        }
      })
      .map(Number);
  };
  const toolOutput = (sessionId: string) => {
    const requests = model.requests.filter((request) => request.headers['x-session-id'] === sessionId);
    const last = requests.at(-1)?.body.messages as Json[];
    const content = last.findLast((message) => message.role === 'tool')?.content ?? '';
    // qwen-code sends content as text blocks.
    return Array.isArray(content)
      ? content.map((block: Json) => String(block.text ?? '')).join('')
      : String(content);
  };

  it('serves two samples in a row with one process, and the second sees nothing of the first', async (context) => {
    if (skipReason !== null) context.skip();
    const [a] = await generate(sample(0, 'Sample one: plant the traces.'));
    expect(a?.status, JSON.stringify(a?.metadata)).toBe('completed');
    await provider.pool.settled();
    const afterA = agents();
    expect(afterA).toHaveLength(1);

    const [b] = await generate(sample(1, 'Sample two: look around.'));
    expect(b?.status, JSON.stringify(b?.metadata)).toBe('completed');
    await provider.pool.settled();
    // The same agent process served both.
    expect(agents()).toEqual(afterA);

    const sessionA = String(a?.session_id);
    const sessionB = String(b?.session_id);
    expect(sessionA).not.toBe(sessionB);
    expect(toolOutput(sessionA)).toContain('planted');
    const seen = toolOutput(sessionB);
    expect(seen).toContain('looked');
    expect(seen).toContain('LEAK=\n');
    expect(seen).toContain('login LEAK=\n');
    expect(seen).not.toContain('SECRET_A');
    expect(seen).not.toContain('a.txt');
    expect(seen).not.toContain('sleep 600');
    // Nothing of sample A's conversation in any of B's model requests (no shared session or history).
    const ofB = model.requests.filter((request) => request.headers['x-session-id'] === sessionB);
    // Two model calls (the tool call, the answer): no side request of a kept agent.
    expect(ofB).toHaveLength(2);
    for (const request of ofB) {
      expect(JSON.stringify(request.body)).not.toContain('plant the traces');
      expect(JSON.stringify(request.body)).not.toContain('SECRET_A');
    }
    // Each sample's calls went to its own trajectory, and only there.
    const ofA = model.requests.filter((request) => request.headers['x-session-id'] === sessionA);
    expect(ofA).toHaveLength(2);
    for (const request of ofA) expect(JSON.stringify(request.body)).not.toContain('look around');
    expect(
      model.requests.every((request) =>
        [sessionA, sessionB].includes(String(request.headers['x-session-id'])),
      ),
    ).toBe(true);
    expect(a?.tokens.length).toBeGreaterThan(0);
    expect(b?.tokens.length).toBeGreaterThan(0);
  }, 600_000);

  it('starts a crashed agent anew, and the next sample succeeds', async (context) => {
    if (skipReason !== null) context.skip();
    await provider.pool.settled();
    const [before] = agents();
    expect(before).toBeDefined();
    process.kill(-(before as number), 'SIGKILL');
    const [c] = await generate(sample(2, 'Sample three: look around.'));
    expect(c?.status, JSON.stringify(c?.metadata)).toBe('completed');
    await provider.pool.settled();
    const after = agents();
    expect(after).toHaveLength(1);
    expect(after[0]).not.toBe(before);
    expect(toolOutput(String(c?.session_id))).toContain('looked');
  }, 600_000);
});
