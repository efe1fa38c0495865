import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { sleep } from '@dressage/protocol/internal';
import { runProcessGroup } from '@dressage/sandbox/internal';

/** An agent CLI published on npm. */
export interface AgentPackage {
  /** npm package name. */
  name: string;
  version: string;
  /** Its executable under `node_modules/.bin`. */
  bin: string;
  /**
   * A Node.js the CLI needs instead of the host's, as an npm package providing `node` (e.g.
   * `node@24`): installed beside the CLI under `runtime/`, first on the CLI's PATH, never the
   * system's Node.
   */
  runtime?: { name: string; version: string };
}

/** The agent CLIs the built-in adapters drive, at the versions checked here. */
export const agentPackages = {
  opencode: { name: 'opencode-ai', version: '1.18.33', bin: 'opencode' },
  qwen_code: { name: '@qwen-code/qwen-code', version: '0.24.4', bin: 'qwen' },
  claude_code: { name: '@anthropic-ai/claude-code', version: '2.1.332', bin: 'claude' },
  codex: { name: '@openai/codex', version: '0.171.0', bin: 'codex' },
  // OpenClaw refuses Node < 24 (`engines: >=24.16.0 <25 || >=26.1.0`), its install scripts too.
  openclaw: {
    name: 'openclaw',
    version: '2026.9.6',
    bin: 'openclaw',
    runtime: { name: 'node', version: '24.21.0' },
  },
} as const satisfies Record<string, AgentPackage>;

/** Where agent CLIs are installed: `$DRESSAGE_AGENT_CACHE_DIR`, else `~/.cache/dressage-agents`. */
export function agentCacheDir(): string {
  return process.env.DRESSAGE_AGENT_CACHE_DIR ?? join(homedir(), '.cache', 'dressage-agents');
}

/** The install directory of one agent package version. */
export function agentInstallDir(agent: AgentPackage, cacheDir = agentCacheDir()): string {
  return join(cacheDir, `${agent.name.replace('/', '+')}@${agent.version}`);
}

/**
 * The directories an agent's PATH must start with: its own Node (when it brings one), then its
 * `node_modules/.bin`.
 */
export function agentBinDirectories(agent: AgentPackage, cacheDir = agentCacheDir()): string[] {
  const dir = agentInstallDir(agent, cacheDir);
  const own = join(dir, 'node_modules', '.bin');
  return agent.runtime ? [join(dir, 'runtime', 'node_modules', '.bin'), own] : [own];
}

/** Options of {@link ensureAgentInstalled}. */
export interface AgentInstallOptions {
  /** Where CLIs are installed. Default {@link agentCacheDir}. */
  cacheDir?: string;
  /**
   * Milliseconds the whole install may take: waiting for another installer's lock, the CLI's own
   * Node and the CLI. Past it npm's process group is killed and the call rejects with
   * `deadline_exceeded`. Default 15 minutes. A caller with a deadline of its own (a test hook)
   * passes one below it, so that a network that fails slowly ends the install, not the caller.
   */
  timeoutMs?: number;
}

const defaultInstallTimeoutMs = 15 * 60_000;

function deadlineError(spec: string, timeoutMs: number, waiting: string): DressageError {
  return new DressageError({
    code: 'deadline_exceeded',
    message: `npm install ${spec} did not finish within ${timeoutMs} ms (${waiting})`,
  });
}

async function npmInstall(
  dir: string,
  spec: string,
  bin: string,
  path: string | undefined,
  deadline: { at: number; timeoutMs: number },
): Promise<void> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'package.json'), '{"private":true}\n');
  const result = await runProcessGroup(['npm', 'install', '--no-audit', '--no-fund', '--no-save', spec], {
    cwd: dir,
    timeoutMs: Math.max(0, deadline.at - Date.now()),
    env: path === undefined ? process.env : { ...process.env, PATH: path },
  });
  if (result.timedOut) throw deadlineError(spec, deadline.timeoutMs, 'npm was killed');
  if (result.returncode !== 0 || !existsSync(bin)) {
    throw new DressageError({
      code: 'unavailable',
      message: `npm install ${spec} failed: ${(result.stderr || result.stdout).slice(-1000)}`,
    });
  }
}

/**
 * Installs an agent CLI with npm into its own directory of the cache (once) and returns the path of
 * its executable. These packages are hundreds of MB, so they are kept out of the workspace install.
 * A CLI that needs another Node gets it from the npm registry first (under `runtime/`), and its own
 * install scripts run with that Node.
 */
export async function ensureAgentInstalled(
  agent: AgentPackage,
  options: AgentInstallOptions = {},
): Promise<string> {
  const dir = agentInstallDir(agent, options.cacheDir ?? agentCacheDir());
  const bin = join(dir, 'node_modules', '.bin', agent.bin);
  if (existsSync(bin)) return bin;
  const timeoutMs = options.timeoutMs ?? defaultInstallTimeoutMs;
  const deadline = { at: Date.now() + timeoutMs, timeoutMs };
  const spec = `${agent.name}@${agent.version}`;
  // Test files and processes install the same CLI at once: one npm runs in a directory, the
  // others wait for it and find the executable.
  const release = await holdInstallLock(`${dir}.lock`, deadline.at);
  if (release === null) throw deadlineError(spec, timeoutMs, 'another install held its lock');
  try {
    if (existsSync(bin)) return bin;
    let path: string | undefined;
    if (agent.runtime) {
      const runtimeDir = join(dir, 'runtime');
      const node = join(runtimeDir, 'node_modules', '.bin', 'node');
      if (!existsSync(node))
        await npmInstall(
          runtimeDir,
          `${agent.runtime.name}@${agent.runtime.version}`,
          node,
          undefined,
          deadline,
        );
      path = `${dirname(node)}:${process.env.PATH ?? ''}`;
    }
    await npmInstall(dir, spec, bin, path, deadline);
    return bin;
  } finally {
    await release();
  }
}

/** Install time after which a lock is taken to be left by a process that died. */
const staleLockMs = 20 * 60_000;

// True when the lock's holder (the pid it wrote) has exited: a test process killed at its timeout
// leaves its lock behind, and the next install must not wait out `staleLockMs` for it.
async function holderExited(path: string): Promise<boolean> {
  const pid = Number(await readFile(join(path, 'pid'), 'utf8').catch(() => ''));
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/**
 * Takes a lock directory (mkdir is atomic), waiting while another live holder has it; returns its
 * release, or null when `deadline` (epoch ms) passed first. A lock whose holder exited, or older
 * than an install may take, is taken over.
 */
export async function holdInstallLock(
  path: string,
  deadline = Number.POSITIVE_INFINITY,
): Promise<(() => Promise<void>) | null> {
  await mkdir(dirname(path), { recursive: true });
  for (;;) {
    try {
      await mkdir(path);
      await writeFile(join(path, 'pid'), String(process.pid));
      return () => rm(path, { recursive: true, force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const age = Date.now() - (await stat(path).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
      if (age > staleLockMs || (await holderExited(path))) await rm(path, { recursive: true, force: true });
      else if (Date.now() >= deadline) return null;
      else await sleep(Math.min(1000, Math.max(0, deadline - Date.now())));
    }
  }
}
