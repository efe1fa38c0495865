import { join } from 'node:path';
import { PaddockWhiteboxAgent, type WhiteboxAgentClass } from '@dressage/paddock';
import { LocalBwrapPool, LocalBwrapProvider, type SandboxProvider } from '@dressage/sandbox';

/** The sandboxes of a recipe's `PaddockWhiteboxAgent`: a command-only pool and its provider. */
export interface WhiteboxSandboxes {
  provider: SandboxProvider;
  /** `N bubblewrap sandboxes`, for the run's log. */
  description: string;
  /** Stops every sandbox and removes the pool's directories. */
  close(): Promise<void>;
}

/** True for an agent class that runs tools in a sandbox (extends `PaddockWhiteboxAgent`). */
export function needsSandbox(AgentClass: WhiteboxAgentClass | null): boolean {
  return AgentClass !== null && AgentClass.prototype instanceof PaddockWhiteboxAgent;
}

/**
 * Starts the network-less bubblewrap slots a `PaddockWhiteboxAgent` leases one per sample: its
 * `shell.exec`, `file.read` and `file.write` (and the toolbox's `sandboxTools()`) run there.
 */
export async function startWhiteboxSandboxes(options: {
  slots: number;
  outputDirectory: string;
}): Promise<WhiteboxSandboxes> {
  const pool = new LocalBwrapPool({
    slots: options.slots,
    mode: 'command_only',
    baseDir: join(options.outputDirectory, 'sandboxes'),
    healthIntervalSeconds: 0,
  });
  await pool.start();
  return {
    provider: new LocalBwrapProvider({ pool }),
    description: `${options.slots} bubblewrap sandboxes without network`,
    async close() {
      await pool.stop();
    },
  };
}
