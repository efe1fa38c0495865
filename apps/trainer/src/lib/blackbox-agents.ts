import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  agentBinDirectories,
  agentInstallDir,
  agentPackages,
  builtinAdapterExecutableVariables,
  createBlackboxGenerate,
  ensureAgentInstalled,
  LocalBwrapPool,
  LocalBwrapProvider,
  type TrajectoryProxy,
} from '@dressage/paddock';
import type { GenerateFunction } from '@dressage/schedulers';
import { expansionOptionsOf } from './expansion-options.js';
import type { LoadedRecipe } from './recipe.js';

/** The agents of a `blackbox` recipe: a sandbox pool and the generate function that leases from it. */
export interface BlackboxAgents {
  generate: GenerateFunction;
  /** `agent@version (slots)`, for the run's log. */
  description: string;
  /** Stops every sandbox and removes the pool's directories. */
  close(): Promise<void>;
}

/** Options of {@link startBlackboxAgents}. */
export interface BlackboxAgentsOptions {
  loaded: LoadedRecipe;
  /** The recording proxy the sandboxed agents reach (their only way out). */
  proxyUrl: string;
  proxy: TrajectoryProxy;
  outputDirectory: string;
}

/**
 * Installs the recipe's agent CLI (once, into the agent cache), starts a pool of network-isolated
 * bubblewrap slots whose only way out is the recording proxy, and returns the blackbox generate
 * function over it.
 */
export async function startBlackboxAgents(options: BlackboxAgentsOptions): Promise<BlackboxAgents> {
  const { recipe } = options.loaded;
  const settings = recipe.blackbox;
  if (settings === undefined) throw new Error('startBlackboxAgents needs a blackbox section');
  const agent = agentPackages[settings.agent];
  const variable = builtinAdapterExecutableVariables[settings.agent];
  const binary = await ensureAgentInstalled(agent);
  const systemPrompt =
    settings.system_prompt === undefined
      ? null
      : await readFile(options.loaded.resolvePath(settings.system_prompt), 'utf8');
  const pool = new LocalBwrapPool({
    slots: settings.slots,
    mode: 'blackbox',
    baseDir: join(options.outputDirectory, 'sandboxes'),
    upstreamUrl: options.proxyUrl,
    ...(recipe.proxy.api_key === 'no-auth' ? {} : { upstreamApiKey: recipe.proxy.api_key }),
    extraReadOnlyMounts: [agentInstallDir(agent)],
    // The CLI's own Node first (OpenClaw brings one), then its executables, then the system's.
    env: {
      [variable]: binary,
      PATH: [...agentBinDirectories(agent), '/usr/local/bin:/usr/bin:/bin'].join(':'),
    },
    healthIntervalSeconds: 0,
  });
  await pool.start();
  const provider = new LocalBwrapProvider({ pool });
  const generate = createBlackboxGenerate({
    provider,
    proxy: options.proxy,
    proxyUrl: options.proxyUrl,
    blackboxType: settings.agent,
    backendOptions: {
      ...settings.backend_options,
      proxy: { ...(settings.backend_options.proxy as object | undefined), max_steps: settings.max_steps },
    },
    systemPrompt,
    serverConfig: { backend_timeout: settings.turn_timeout_seconds },
    ...expansionOptionsOf(recipe),
  });
  return {
    generate: (sample) => generate(sample),
    description: `${agent.name}@${agent.version} in ${settings.slots} bubblewrap sandboxes`,
    async close() {
      await pool.stop();
    },
  };
}
