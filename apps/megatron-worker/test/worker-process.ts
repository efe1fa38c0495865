import { type ChildProcess, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The app's root (where the Python package lives). */
export const appRoot = join(dirname(fileURLToPath(import.meta.url)), '..');

/** A running Python worker. */
export interface WorkerProcess {
  address: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Starts `python3 -m dressage_megatron_worker` on a free loopback port and resolves once it prints
 * where it listens. Debian's interpreter: another python3 earlier on PATH may lack grpc.
 */
export function startWorker(args: string[]): Promise<WorkerProcess> {
  const child = spawn(
    '/usr/bin/python3',
    ['-m', 'dressage_megatron_worker', '--port', '0', '--stop-at-stdin-eof', ...args],
    {
      cwd: appRoot,
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  let errors = '';
  child.stderr?.on('data', (data: Buffer) => {
    errors = (errors + data.toString()).slice(-4000);
  });
  const stop = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) {
        resolve();
        return;
      }
      child.once('exit', () => resolve());
      child.stdin?.end();
      child.kill('SIGTERM');
    });
  return new Promise((resolve, reject) => {
    let output = '';
    child.stdout?.on('data', (data: Buffer) => {
      output += data.toString();
      const match = /listening on ([\w.]+):(\d+)/.exec(output);
      if (match) resolve({ address: `127.0.0.1:${match[2]}`, child, stop });
    });
    child.once('exit', (code) =>
      reject(new Error(`the worker exited with ${code} before listening:\n${errors}`)),
    );
    child.once('error', reject);
  });
}
