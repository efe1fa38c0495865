import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { DressageError } from '@dressage/protocol';

/** Options of {@link startEngineProcess}. */
export interface EngineProcessOptions {
  /** A checkpoint directory (`saveCheckpoint`) the engine serves at start. */
  modelDirectory: string;
  /** The tokenizer directory (for the eos ids and text decoding). */
  tokenizerDirectory: string;
  /** Sampling seed. */
  seed: number;
  /** Port on loopback; 0 picks a free one. */
  port: number;
  /** Receives the engine's log lines. */
  log: (line: string) => void;
  /** How long to wait for the engine to listen. Default 120 s. */
  startTimeoutMs?: number;
}

/** An embedded engine running in its own process. */
export interface EngineProcess {
  url: string;
  pid: number;
  /** Stops the engine (SIGTERM, then SIGKILL after a grace period) and waits for it to exit. */
  close(): Promise<void>;
}

/** The `dressage-engine` executable of the installed `@dressage/embedded`. */
export function engineExecutablePath(): string {
  const require = createRequire(import.meta.url);
  return join(
    dirname(require.resolve('@dressage/embedded/package.json')),
    'dist',
    'bin',
    'dressage-engine.js',
  );
}

function waitForExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/**
 * Starts `dressage-engine serve` as a child process on loopback and resolves once it listens.
 * The engine then decodes on its own thread (its own core) while the trainer computes in this
 * process; weights reach it through `/update_weights_from_disk`. It exits with this process,
 * even one killed by SIGKILL (its stdin ends).
 */
export async function startEngineProcess(options: EngineProcessOptions): Promise<EngineProcess> {
  const child = spawn(
    process.execPath,
    [
      engineExecutablePath(),
      'serve',
      '--model',
      options.modelDirectory,
      '--tokenizer',
      options.tokenizerDirectory,
      '--host',
      '127.0.0.1',
      '--port',
      String(options.port),
      '--seed',
      String(options.seed),
      '--exit-with-stdin',
    ],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  const stderrTail: string[] = [];
  createInterface({ input: child.stderr! }).on('line', (line) => {
    stderrTail.push(line);
    if (stderrTail.length > 20) stderrTail.shift();
    options.log(`engine: ${line}`);
  });
  const timeoutMs = options.startTimeoutMs ?? 120_000;
  const url = await new Promise<string>((resolve, reject) => {
    const fail = (reason: string) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(
        new DressageError({
          code: 'unavailable',
          message: `the engine process did not start: ${reason}${stderrTail.length > 0 ? `\n${stderrTail.join('\n')}` : ''}`,
        }),
      );
    };
    const timer = setTimeout(() => fail(`not listening after ${timeoutMs} ms`), timeoutMs);
    child.once('error', (error) => fail(error.message));
    child.once('exit', (code, signal) => fail(`exited with ${signal ?? `code ${code}`}`));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const match = /listening on (\S+)/.exec(line);
      if (match === null) {
        options.log(`engine: ${line}`);
        return;
      }
      clearTimeout(timer);
      child.removeAllListeners('exit');
      resolve(match[1]!);
    });
  });
  return {
    url,
    pid: child.pid!,
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = waitForExit(child);
      child.kill('SIGTERM');
      const grace = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(grace);
    },
  };
}
