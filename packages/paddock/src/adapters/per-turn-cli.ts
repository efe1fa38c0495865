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

// Executables whose `--version` ran, by command and PATH: the check runs once per server process
// (a kept slot server serves many samples), not at every registration and health probe.
const versionChecked = new Map<string, Promise<boolean>>();

/**
 * An agent CLI run once per turn (headless, its session resumed by id): the adapter is healthy
 * once `<command> --version` has worked (checked once per server process and executable), and a
 * turn is one process in the work dir, killed with its process group when the turn is stopped.
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
    const env = this.versionEnvironment();
    const key = `${this.command}\0${env.PATH ?? ''}`;
    let check = versionChecked.get(key);
    if (check === undefined) {
      check = runProcessGroup([this.command, '--version'], { env, timeoutMs: 60_000 }).then(
        (result) => result.returncode === 0,
        () => false,
      );
      versionChecked.set(key, check);
    }
    const ok = await check;
    // Only a success is remembered: a failed check runs again next time.
    if (!ok && versionChecked.get(key) === check) versionChecked.delete(key);
    return ok;
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
