import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { runProcessGroup } from '../sandbox/process-group.js';

/** An agent CLI published on npm. */
export interface AgentPackage {
  /** npm package name. */
  name: string;
  version: string;
  /** Its executable under `node_modules/.bin`. */
  bin: string;
}

/** The agent CLIs the built-in adapters drive, at the versions checked here. */
export const agentPackages = {
  opencode: { name: 'opencode-ai', version: '1.18.33', bin: 'opencode' },
  qwen_code: { name: '@qwen-code/qwen-code', version: '0.24.4', bin: 'qwen' },
  claude_code: { name: '@anthropic-ai/claude-code', version: '2.1.332', bin: 'claude' },
  codex: { name: '@openai/codex', version: '0.171.0', bin: 'codex' },
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
 * Installs an agent CLI with npm into its own directory of the cache (once) and returns the path of
 * its executable. These packages are hundreds of MB, so they are kept out of the workspace install.
 */
export async function ensureAgentInstalled(agent: AgentPackage, cacheDir = agentCacheDir()): Promise<string> {
  const dir = agentInstallDir(agent, cacheDir);
  const bin = join(dir, 'node_modules', '.bin', agent.bin);
  if (existsSync(bin)) return bin;
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'package.json'), '{"private":true}\n');
  const result = await runProcessGroup(
    ['npm', 'install', '--no-audit', '--no-fund', '--no-save', `${agent.name}@${agent.version}`],
    { cwd: dir, timeoutMs: 15 * 60_000 },
  );
  if (result.returncode !== 0 || !existsSync(bin)) {
    throw new DressageError({
      code: 'unavailable',
      message: `npm install ${agent.name}@${agent.version} failed: ${(result.stderr || result.stdout).slice(-1000)}`,
    });
  }
  return bin;
}
