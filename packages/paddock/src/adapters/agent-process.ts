import { type ChildProcess, spawn } from 'node:child_process';
import { readdir, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { killProcessGroup } from '@dressage/sandbox/internal';

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** A long-lived agent process (a server) in its own process group, stdin closed. */
export class AgentProcess {
  #child: ChildProcess | null = null;
  #output = '';

  /** The last few KiB of its stdout and stderr, for error messages. */
  get tail(): string {
    return this.#output.slice(-4000);
  }

  /** Its process id (and process group id: it leads its own group), or null when not started. */
  get pid(): number | null {
    return this.#child?.pid ?? null;
  }

  get running(): boolean {
    return this.#child !== null && this.#child.exitCode === null && this.#child.signalCode === null;
  }

  start(argv: readonly string[], options: { cwd: string; env: NodeJS.ProcessEnv }): void {
    const [command, ...args] = argv;
    // Agents hang on a stdin pipe that never closes: give them none.
    const child = spawn(command as string, args, {
      cwd: options.cwd,
      env: options.env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (chunk: Buffer) => {
      this.#output = (this.#output + chunk.toString('utf8')).slice(-16_000);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    child.on('error', (error) => keep(Buffer.from(`spawn error: ${error.message}\n`)));
    this.#child = child;
  }

  async stop(): Promise<void> {
    const child = this.#child;
    this.#child = null;
    await stopProcessGroup(child);
  }
}

/**
 * Stops a child started in its own process group: SIGTERM to the group, SIGKILL after 2 s; resolves
 * when it closed, or after 5 s whatever happened. Nothing to do for a child that already exited.
 */
export async function stopProcessGroup(child: ChildProcess | null): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    child.once('close', () => resolve());
    killProcessGroup(child.pid, 'SIGTERM');
    setTimeout(() => killProcessGroup(child.pid, 'SIGKILL'), 2000).unref();
    setTimeout(resolve, 5000).unref();
  });
}

/** Environment for an agent: the host's PATH and locale, a private HOME, nothing credential-like. */
export function agentEnv(home: string, extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const key of ['PATH', 'LANG', 'LC_ALL', 'TERM', 'TZ', 'NODE_OPTIONS']) {
    const value = process.env[key];
    if (value !== undefined) env[key] = value;
  }
  return {
    ...env,
    HOME: home,
    XDG_CONFIG_HOME: `${home}/.config`,
    XDG_DATA_HOME: `${home}/.local/share`,
    XDG_CACHE_HOME: `${home}/.cache`,
    XDG_STATE_HOME: `${home}/.local/state`,
    NO_COLOR: '1',
    CI: '1',
    ...extra,
  };
}

/**
 * Removes every entry of `dir` not named in `keep` (a kept agent's home between samples); nothing
 * to do when `dir` does not exist.
 */
export async function removeAllBut(dir: string, keep: Iterable<string>): Promise<void> {
  const kept = new Set(keep);
  const entries = await readdir(dir).catch(() => [] as string[]);
  await Promise.all(
    entries
      .filter((entry) => !kept.has(entry))
      .map((entry) => rm(join(dir, entry), { recursive: true, force: true })),
  );
}
