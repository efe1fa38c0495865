import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CausalLanguageModel,
  type EmbeddedTrainerServer,
  InferenceEngine,
  initializeBackend,
  startEmbeddedTrainerServer,
  TokenVocabulary,
} from '@dressage/embedded';
import { type ProxyProcess, startProxyProcess } from '@dressage/guarantees/proxy-process';
import {
  type AgentPackage,
  agentBinDirectories,
  agentInstallDir,
  agentPackages,
  BlackboxClient,
  blackboxSlotServer,
  createBlackboxGenerate,
  ensureAgentInstalled,
} from '@dressage/paddock';
import { createSample, type Sample, type Segment } from '@dressage/protocol';
import type { BlackboxTurn } from '@dressage/protocol/blackbox';
import { ProxyClient } from '@dressage/proxy';
import { LocalBwrapProvider } from '@dressage/sandbox';
import { findFreePortRange } from '@dressage/sandbox/internal';
import { convertSamplesToPackedTrainBatch, createTrainerClient } from '@dressage/trainer-bridge';
import { QwenAgentModel } from './qwen-agent-model.js';

type Json = Record<string, unknown>;

/** The agent CLIs with a built-in adapter, by `blackbox_type`. */
export type CliType = keyof typeof agentPackages;

/** The environment variable through which the BlackboxServer finds each CLI's executable. */
export const binVariables: Record<CliType, string> = {
  opencode: 'DRESSAGE_OPENCODE_BIN',
  qwen_code: 'DRESSAGE_QWEN_CODE_BIN',
  claude_code: 'DRESSAGE_CLAUDE_CODE_BIN',
  codex: 'DRESSAGE_CODEX_BIN',
  openclaw: 'DRESSAGE_OPENCLAW_BIN',
};

/** True where bubblewrap can make sandboxes. */
export const bwrapAvailable = (() => {
  try {
    execFileSync('bwrap', ['--version']);
    return true;
  } catch {
    return false;
  }
})();

/** A task turn: the model writes `file` containing `word` with the CLI's shell tool. */
export function task(file: string, word: string): string {
  return `Create ${file} in the current directory containing ${word}. Use your shell tool.`;
}

/** An `after_agent` check that passes when `file` holds `word` in the slot's work dir. */
export function checkCommand(file: string, word: string): Json {
  return { name: 'check', cmd: `test "$(cat /workspace/${file})" = ${word} && echo PASS`, required: false };
}

/** The reward of a sample: 1 when its `after_agent` check passed, else 0. */
export function rewardFromCheck(sample: Sample): number {
  const results = (sample.metadata.execute_cmds ?? []) as Json[];
  const check = results.find((result) => result.stage === 'after_agent' && result.name === 'check');
  return check?.returncode === 0 && String(check.stdout).includes('PASS') ? 1 : 0;
}

/**
 * One CLI end to end: the real CLI in a bubblewrap slot running the BlackboxServer, whose LLM proxy
 * reaches the built `dressage-proxy` (TITO mode, the real Qwen3 tokenizer and template) through the
 * pool's pipe, and an engine answering real Qwen3 ids.
 */
export class CliEndToEnd {
  private constructor(
    readonly type: CliType,
    readonly model: QwenAgentModel,
    readonly proxy: ProxyProcess,
    readonly provider: LocalBwrapProvider,
    private readonly scratch: string,
    readonly backendOptions: Json,
  ) {}

  /** Installs the CLI (once, into the agent cache) and starts everything; a reason string when it cannot. */
  static async start(
    type: CliType,
    backendOptions: Json = {},
    proxyFlags: readonly string[] = [],
  ): Promise<CliEndToEnd | string> {
    if (!bwrapAvailable) return 'bubblewrap is not available';
    const agent: AgentPackage = agentPackages[type];
    let bin: string;
    try {
      // Below the 900 s hook: a network that fails slowly ends the install, and the file skips.
      bin = await ensureAgentInstalled(agent, { timeoutMs: 720_000 });
    } catch (error) {
      return `cannot install ${agent.name}@${agent.version}: ${String(error)}`;
    }
    const scratch = mkdtempSync(join(tmpdir(), `agent-e2e-${type}-`));
    const model = await QwenAgentModel.start();
    const proxy = await startProxyProcess(model.url, [
      '--store-dir',
      join(scratch, 'store'),
      '--record-token-versions',
      ...proxyFlags,
    ]);
    const provider = new LocalBwrapProvider({
      slots: 1,
      mode: 'blackbox',
      server: blackboxSlotServer(),
      baseDir: join(scratch, 'pool'),
      basePort: await findFreePortRange(1),
      upstreamUrl: proxy.url,
      healthIntervalSeconds: 0,
      extraReadOnlyMounts: [agentInstallDir(agent)],
      env: {
        [binVariables[type]]: bin,
        // The CLI's own Node (when it brings one) and node_modules/.bin first.
        PATH: [...agentBinDirectories(agent), '/usr/local/bin', '/usr/bin', '/bin'].join(':'),
      },
    });
    await provider.pool.start();
    return new CliEndToEnd(type, model, proxy, provider, scratch, backendOptions);
  }

  /** The blackbox generate function of this CLI against the recording proxy. */
  generate(maxSteps = 20): (sample: Sample) => Promise<Sample[]> {
    return createBlackboxGenerate({
      provider: this.provider,
      proxy: new ProxyClient({ baseUrl: this.proxy.url }),
      proxyUrl: this.proxy.url,
      blackboxType: this.type,
      backendOptions: { ...this.backendOptions, proxy: { max_steps: maxSteps } },
      retry: { maxAttempts: 2 },
    });
  }

  /** One sample: the task as its prompt, the check as its `after_agent` command. */
  sample(file: string, word: string): Sample {
    return createSample({
      index: 0,
      group_index: 0,
      prompt: task(file, word),
      metadata: {
        instance_id: `${this.type}-task`,
        blackbox_execute_cmds: { after_agent: [checkCommand(file, word)] },
      },
    });
  }

  /**
   * Several user turns in one session, driven through the slot's BlackboxServer; returns what the
   * proxy recorded (finalized and drained) and each turn's status.
   */
  async runTurns(
    texts: readonly string[],
    session = `bbs-${this.type}-turns`,
  ): Promise<{
    turns: BlackboxTurn[];
    segments: Segment[];
  }> {
    const lease = await this.provider.create({
      trajectoryId: session,
      services: [{ name: 'blackbox', port: 31000, healthPath: '/health' }],
      metadata: { paddock_mode: 'blackbox' },
    });
    try {
      const endpoint = lease.endpoints.blackbox as { url: string; headers: Record<string, string> };
      const client = new BlackboxClient(endpoint.url, { maxAttempts: 2 }, endpoint.headers);
      await client.register({
        blackbox_type: this.type,
        router: this.proxy.url,
        bound_session_id: session,
        bound_instance_id: `${this.type}-turns`,
        backend_options: { ...this.backendOptions, proxy: { max_steps: 20 } },
      });
      const turns: BlackboxTurn[] = [];
      for (const [index, text] of texts.entries())
        turns.push(
          await client.callAgent(session, [{ role: 'user', content: text }], { turnId: `turn-${index + 1}` }),
        );
      const proxy = new ProxyClient({ baseUrl: this.proxy.url });
      await proxy.finalizeSession(session);
      const read = await proxy.readTrajectory({ trajectoryId: session, drain: true });
      return { turns, segments: read.data };
    } finally {
      await this.provider.terminate(lease).catch(() => undefined);
    }
  }

  /**
   * SIGKILLs the processes inside this pool's slots whose command line contains `pattern`, or for
   * `''` every process of the slots, bwrap included (the sandbox dies): bwrap processes this test
   * process started, and their descendants.
   * Returns how many were killed.
   */
  killInSlots(pattern: string): number {
    const parents = new Map<number, number>();
    const commands = new Map<number, string>();
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
        // The parent pid is the second field after the parenthesised command name.
        parents.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
        commands.set(Number(entry), readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' '));
      } catch {
        // Gone already.
      }
    }
    const isSandbox = (pid: number) => /^(\S*\/)?bwrap /.test(commands.get(pid) ?? '');
    const inSlot = (pid: number): boolean => {
      let sandboxed = isSandbox(pid);
      for (
        let current = parents.get(pid);
        current !== undefined && current > 1;
        current = parents.get(current)
      ) {
        if (current === process.pid) return sandboxed;
        if (isSandbox(current)) sandboxed = true;
      }
      return false;
    };
    let killed = 0;
    for (const [pid, command] of commands) {
      // bwrap's own argv names every path of the slot: it matches only the empty pattern.
      if (!inSlot(pid) || (pattern !== '' && (isSandbox(pid) || !command.includes(pattern)))) continue;
      try {
        process.kill(pid, 'SIGKILL');
        killed += 1;
      } catch {
        // Gone already.
      }
    }
    return killed;
  }

  async close(): Promise<void> {
    await this.provider.close();
    await this.proxy.kill();
    await this.model.close();
    rmSync(this.scratch, { recursive: true, force: true });
  }
}

/** Longest sequence the embedded trainer holds on its wasm backend (attention is not chunked). */
export const trainerWindowTokens = 6144;

/**
 * The sample the embedded trainer can hold: the whole response and as much of the prompt's end as
 * fits in {@link trainerWindowTokens}. Prompt tokens carry no loss, so the dropped start changes
 * what the model conditions on, not what is trained.
 */
export function trainerWindow(sample: Sample, limit = trainerWindowTokens): Sample {
  if (sample.tokens.length <= limit) return sample;
  if (sample.response_length >= limit)
    throw new Error(`response of ${sample.response_length} tokens exceeds ${limit}`);
  return { ...sample, tokens: sample.tokens.slice(-limit) };
}

/**
 * One `Train` call on the embedded trainer over gRPC with these samples (rewards set), each cut
 * to {@link trainerWindow}, on a tiny model whose vocabulary is the samples' tokens. Returns the
 * trainer's answer.
 */
export async function trainOnce(full: readonly Sample[]): Promise<Json> {
  const samples = full.map((sample) => trainerWindow(sample));
  await initializeBackend();
  const ids = new Set<number>();
  let longest = 0;
  for (const sample of samples) {
    for (const id of sample.tokens) ids.add(id);
    longest = Math.max(longest, sample.tokens.length);
  }
  const model = CausalLanguageModel.create(new TokenVocabulary([...ids].sort((a, b) => a - b)), {
    contextLength: longest + 1,
    modelDimension: 8,
    headCount: 1,
    layerCount: 1,
    feedForwardDimension: 8,
  });
  const engine = new InferenceEngine({ model, weightVersion: '0' });
  let served: EmbeddedTrainerServer | null = null;
  const client = { current: null as ReturnType<typeof createTrainerClient> | null };
  try {
    served = await startEmbeddedTrainerServer({ model, engine });
    client.current = createTrainerClient(served.address);
    const batch = convertSamplesToPackedTrainBatch(samples, { globalBatchSize: samples.length });
    return (await client.current.train(batch)) as unknown as Json;
  } finally {
    client.current?.close();
    await served?.close();
    engine.close();
    model.dispose();
  }
}
