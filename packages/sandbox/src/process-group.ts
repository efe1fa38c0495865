import { spawn } from 'node:child_process';
import { DressageError } from '@dressage/protocol';
import { killProcessGroup, SandboxProcess } from './sandbox-process.js';

export { killProcessGroup } from './sandbox-process.js';

/** Options of {@link runProcessGroup}. */
export interface ProcessGroupOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Milliseconds; on expiry the whole process group gets SIGKILL. */
  timeoutMs?: number;
  stdin?: string;
  /** Bytes kept of each of stdout and stderr (the head is kept). Default 8 MiB. */
  outputLimitBytes?: number;
  signal?: AbortSignal;
  /**
   * `argv` starts bwrap with `--info-fd 3`: a timeout or an abort kills the sandbox too, which bwrap
   * started in a session of its own (see {@link SandboxProcess}).
   */
  bwrapInfo?: boolean;
  /** Called with the process right after spawn (to track it for a later stop). */
  onSpawn?: (process: SandboxProcess) => void;
}

/** What {@link runProcessGroup} observed. */
export interface ProcessGroupResult {
  stdout: string;
  stderr: string;
  /** Exit code, or -1 when a signal ended the process. */
  returncode: number;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  aborted: boolean;
  durationSeconds: number;
  startedAt: Date;
  finishedAt: Date;
}

class BoundedBuffer {
  readonly #chunks: Buffer[] = [];
  #size = 0;
  truncated = false;
  readonly #limit: number;

  constructor(limit: number) {
    this.#limit = limit;
  }
  push(chunk: Buffer): void {
    if (this.#size >= this.#limit) {
      this.truncated = true;
      return;
    }
    const room = this.#limit - this.#size;
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    if (kept.length < chunk.length) this.truncated = true;
    this.#chunks.push(kept);
    this.#size += kept.length;
  }
  text(): string {
    return Buffer.concat(this.#chunks).toString('utf8');
  }
}

/**
 * Runs `argv` as the leader of a new process group and waits for it. A timeout or an abort kills the
 * whole group, so grandchildren that a shell left behind die with it. Never rejects for a non-zero
 * exit; rejects only when the program cannot be spawned.
 */
export function runProcessGroup(
  argv: readonly string[],
  options: ProcessGroupOptions = {},
): Promise<ProcessGroupResult> {
  const [command, ...args] = argv;
  if (command === undefined)
    return Promise.reject(
      new DressageError({ code: 'invalid_argument', message: 'runProcessGroup: empty argv' }),
    );
  const limit = options.outputLimitBytes ?? 8 * 1024 * 1024;
  const startedAt = new Date();
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env,
      detached: true,
      stdio: [
        options.stdin === undefined ? 'ignore' : 'pipe',
        'pipe',
        'pipe',
        ...(options.bwrapInfo ? (['pipe'] as const) : []),
      ],
    });
    const group = new SandboxProcess(child);
    const stdout = new BoundedBuffer(limit);
    const stderr = new BoundedBuffer(limit);
    let timedOut = false;
    let aborted = false;
    let spawned = false;
    child.stdout?.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk));
    if (options.stdin !== undefined && child.stdin !== null) {
      child.stdin.on('error', () => {});
      child.stdin.end(options.stdin);
    }
    const timer =
      options.timeoutMs !== undefined && Number.isFinite(options.timeoutMs)
        ? setTimeout(
            () => {
              timedOut = true;
              group.kill();
            },
            Math.max(0, options.timeoutMs),
          )
        : undefined;
    const onAbort = () => {
      aborted = true;
      group.kill();
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (options.signal?.aborted) onAbort();
    child.on('spawn', () => {
      spawned = true;
      options.onSpawn?.(group);
    });
    child.on('error', (error) => {
      if (timer) clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      if (!spawned) reject(error);
    });
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      // Whatever the leader left running in its group goes with it.
      killProcessGroup(child.pid);
      const finishedAt = new Date();
      resolve({
        stdout: stdout.text(),
        stderr: stderr.text(),
        returncode: code ?? -1,
        signal,
        timedOut,
        aborted,
        durationSeconds: (finishedAt.getTime() - startedAt.getTime()) / 1000,
        startedAt,
        finishedAt,
      });
    });
  });
}
