import { type ChildProcess, spawn } from 'node:child_process';
import { DressageError } from '@dressage/protocol';

/** A TrainerService process this app started. */
export interface TrainerWorker {
  /** `127.0.0.1:port` for `createTrainerClient`. */
  address: string;
  /** Stops the process (SIGTERM, then SIGKILL after `graceMs`) and waits for it. */
  close(graceMs?: number): Promise<void>;
}

/** Options of {@link startTrainerWorker}. */
export interface StartTrainerWorkerOptions {
  /** The interpreter; Debian's `/usr/bin/python3` has torch, grpcio and numpy. */
  python: string;
  /** The folder holding the `dressage_megatron_worker` package (apps/megatron-worker). */
  workerDirectory: string;
  /** Flags after `--port 0` (the actor and its settings). */
  args: readonly string[];
  /** Longest wait for the worker to listen. Default 120 s. */
  startTimeoutMs?: number;
}

/**
 * Starts `python -m dressage_megatron_worker` on a free loopback port and resolves once it prints
 * where it listens. It runs with `--stop-at-stdin-eof`: it also stops when its stdin closes, so it
 * never outlives this process.
 * @throws DressageError `unavailable` when it exits (or stays silent) before listening, with the
 * end of its stderr.
 */
export function startTrainerWorker(options: StartTrainerWorkerOptions): Promise<TrainerWorker> {
  const child: ChildProcess = spawn(
    options.python,
    [
      '-m',
      'dressage_megatron_worker',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      // Our stdin pipe ends when this process dies, even by SIGKILL: the worker stops with it.
      '--stop-at-stdin-eof',
      ...options.args,
    ],
    {
      cwd: options.workerDirectory,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, PYTHONUNBUFFERED: '1' },
    },
  );
  let errors = '';
  child.stderr?.on('data', (data: Buffer) => {
    errors = (errors + data.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const close = async (graceMs = 10_000) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.stdin?.end();
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
  return new Promise((resolve, reject) => {
    const fail = (reason: string) => {
      clearTimeout(timer);
      void close(0);
      reject(
        new DressageError({
          code: 'unavailable',
          message: `the trainer worker (${options.python} -m dressage_megatron_worker in ${options.workerDirectory}) ${reason}:\n${errors}`,
        }),
      );
    };
    const timer = setTimeout(() => fail('did not listen in time'), options.startTimeoutMs ?? 120_000);
    let output = '';
    child.stdout?.on('data', (data: Buffer) => {
      output = (output + data.toString()).slice(-4000);
      const match = /listening on [\w.]+:(\d+)/.exec(output);
      if (match !== null) {
        clearTimeout(timer);
        resolve({ address: `127.0.0.1:${match[1]}`, close });
      }
    });
    child.once('exit', (code, signal) => fail(`exited (${code ?? signal}) before listening`));
    child.once('error', (error) => fail(`could not start: ${error.message}`));
  });
}
