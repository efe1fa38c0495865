// Starts a bench server (bench-servers.ts by default) in a child process (its own event loop, as deployed) and asks
// it for its CPU time.
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { proxyNodeFlags } from '../src/node-flags.js';

const packageRoot = fileURLToPath(new URL('..', import.meta.url));

// The V8 flags the `dressage-proxy` bin runs with (its shebang): the proxy is measured as deployed,
// and the pass-through gets the same runtime so the comparison stays like for like.
const serverNodeFlags = proxyNodeFlags;

/** Starts `bench-servers.ts <role> ...args` and resolves with its URL once it prints `ready`. */
export function startServer(role: string, ...args: string[]): Promise<{ child: ChildProcess; url: string }> {
  return spawnServer('bench/bench-servers.ts', serverNodeFlags, role, args);
}

/** Starts `<script> <role> ...args` with these V8 flags and resolves with its URL once it prints `ready`. */
export function spawnServer(
  script: string,
  nodeFlags: readonly string[],
  role: string,
  args: readonly string[],
): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(
    process.execPath,
    [...nodeFlags, '--conditions=@dressage/source', '--import', 'tsx', script, role, ...args],
    { cwd: packageRoot, stdio: ['ignore', 'pipe', 'inherit', 'ipc'] },
  );
  return new Promise((resolve, reject) => {
    let output = '';
    child.stdout!.on('data', (data: Buffer) => {
      output += data.toString();
      const match = /ready (\S+)/.exec(output);
      if (match) resolve({ child, url: match[1]! });
    });
    child.once('exit', (code) => reject(new Error(`${role} exited with ${code}`)));
  });
}

/** CPU microseconds a server child has used so far (asked over IPC). */
export function cpuMicroseconds(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    const listener = (message: unknown) => {
      const cpu = (message as { cpu?: unknown }).cpu;
      if (typeof cpu !== 'number') return;
      child.off('message', listener);
      resolve(cpu);
    };
    child.on('message', listener);
    child.send('cpu');
  });
}
