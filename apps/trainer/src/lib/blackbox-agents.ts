import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  agentBinDirectories,
  agentInstallDir,
  agentPackages,
  blackboxSlotServer,
  builtinAdapterExecutableVariables,
  createBlackboxGenerate,
  ensureAgentInstalled,
  type TrajectoryProxy,
} from '@dressage/paddock';
import { DressageError } from '@dressage/protocol';
import { LocalBwrapPool, LocalBwrapProvider } from '@dressage/sandbox';
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

/** What a blackbox run takes from the recipe: the adapter, the pool's slots, the generate function's settings. */
export interface BlackboxPlan {
  agent: BlackboxAgentName;
  slots: number;
  /** `createBlackboxGenerate`'s settings, less the provider and proxy. */
  generate: {
    blackboxType: BlackboxAgentName;
    backendOptions: Record<string, unknown>;
    systemPrompt: string | null;
    serverConfig: { backend_timeout: number };
  } & ReturnType<typeof expansionOptionsOf>;
}

type BlackboxAgentName = NonNullable<LoadedRecipe['recipe']['blackbox']>['agent'];

/**
 * The {@link BlackboxPlan} of a recipe with a `blackbox` section: `system_prompt` read (relative to
 * the recipe), `max_steps` as the agent-side proxy's, `turn_timeout_seconds` as the server's
 * backend timeout.
 */
export async function blackboxPlanOf(loaded: LoadedRecipe): Promise<BlackboxPlan> {
  const { recipe } = loaded;
  const settings = recipe.blackbox;
  if (settings === undefined)
    throw new DressageError({ code: 'internal', message: 'blackboxPlanOf needs a blackbox section' });
  const systemPrompt =
    settings.system_prompt === undefined
      ? null
      : await readFile(loaded.resolvePath(settings.system_prompt), 'utf8');
  return {
    agent: settings.agent,
    slots: settings.slots,
    generate: {
      blackboxType: settings.agent,
      backendOptions: {
        ...settings.backend_options,
        proxy: { ...(settings.backend_options.proxy as object | undefined), max_steps: settings.max_steps },
      },
      systemPrompt,
      serverConfig: { backend_timeout: settings.turn_timeout_seconds },
      ...expansionOptionsOf(recipe),
    },
  };
}

/**
 * Installs the recipe's agent CLI (once, into the agent cache), starts a pool of network-isolated
 * bubblewrap slots whose only way out is the recording proxy, and returns the blackbox generate
 * function over it.
 */
export async function startBlackboxAgents(options: BlackboxAgentsOptions): Promise<BlackboxAgents> {
  const { recipe } = options.loaded;
  const plan = await blackboxPlanOf(options.loaded);
  const agent = agentPackages[plan.agent];
  const variable = builtinAdapterExecutableVariables[plan.agent];
  const binary = await ensureAgentInstalled(agent);
  const pool = new LocalBwrapPool({
    slots: plan.slots,
    mode: 'blackbox',
    server: blackboxSlotServer(),
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
    ...plan.generate,
  });
  return {
    generate: (sample) => generate(sample),
    description: `${agent.name}@${agent.version} in ${plan.slots} bubblewrap sandboxes`,
    async close() {
      await pool.stop();
    },
  };
}
