import { DressageError } from '@dressage/protocol';
import { type ProcessGroupResult, runProcessGroup } from '@dressage/sandbox/internal';
import {
  type AdapterContext,
  type AdapterTurn,
  type AdapterTurnResult,
  type BlackboxAdapter,
  defaultCapabilities,
} from '../blackbox/adapter.js';
import { agentEnv } from './agent-process.js';

/**
 * An agent CLI run once per turn (headless, its session resumed by id): the adapter is healthy
 * while `<command> --version` works, and a turn is one process in the work dir, killed with its
 * process group when the turn is stopped.
 */
export abstract class PerTurnCliAdapter implements BlackboxAdapter {
  abstract readonly type: string;
  readonly capabilities = defaultCapabilities;
  protected context: AdapterContext | null = null;
  /** The agent's HOME, under the runtime dir (set by `init`). */
  protected home = '';
  #current: AbortController | null = null;

  /** The executable: the operator's environment variable, else the CLI's name on PATH. */
  protected abstract get command(): string;

  /** Writes the CLI's config; `init` then checks that it runs. */
  protected abstract configure(context: AdapterContext): Promise<void>;

  /** The turn itself: runs the CLI through {@link runCli} and converts what it printed. */
  abstract runTurn(turn: AdapterTurn): Promise<AdapterTurnResult>;

  /** The environment `--version` runs with. */
  protected versionEnvironment(): NodeJS.ProcessEnv {
    return agentEnv(this.home, {});
  }

  async init(context: AdapterContext): Promise<void> {
    this.context = context;
    await this.configure(context);
    if (!(await this.health())) {
      throw new DressageError({
        code: 'unavailable',
        message: `${this.type} cannot run: ${this.command} --version failed`,
      });
    }
  }

  async health(): Promise<boolean> {
    if (this.context === null) return false;
    try {
      const result = await runProcessGroup([this.command, '--version'], {
        env: this.versionEnvironment(),
        timeoutMs: 60_000,
      });
      return result.returncode === 0;
    } catch {
      return false;
    }
  }

  /**
   * Runs one CLI process for `turn` in the work dir until it exits or the turn is stopped, then
   * waits for the LLM proxy's requests to drain.
   */
  protected async runCli(
    turn: AdapterTurn,
    argv: readonly string[],
    env: NodeJS.ProcessEnv,
  ): Promise<ProcessGroupResult> {
    const context = this.context as AdapterContext;
    this.#current = new AbortController();
    const stop = () => this.#current?.abort();
    turn.signal.addEventListener('abort', stop, { once: true });
    try {
      const result = await runProcessGroup(argv, { cwd: context.workDir, env, signal: this.#current.signal });
      if (result.aborted)
        throw new DressageError({ code: 'cancelled', message: `${this.type} run was aborted` });
      await context.drainModelRequests();
      return result;
    } finally {
      turn.signal.removeEventListener('abort', stop);
      this.#current = null;
    }
  }

  /** The error for a run that ended without anything to convert. */
  protected exitError(result: ProcessGroupResult): DressageError {
    return new DressageError({
      code: 'unavailable',
      message: `${this.type} exited with ${result.returncode}: ${(result.stderr || result.stdout).slice(-800)}`,
      details: { returncode: result.returncode },
    });
  }

  async abort(): Promise<void> {
    this.#current?.abort();
  }

  async close(): Promise<void> {
    this.#current?.abort();
  }
}
