// Starts a bench server (bench-servers.ts by default) in a child process (its own event loop, as deployed) and asks
// it for its CPU time.
import { type ChildProcess, spawn } from 'node:child_process';
import { basename, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'tsup';
import { proxyNodeFlags } from '../src/node-flags.js';

const packageRoot = fileURLToPath(new URL('..', import.meta.url));

// The V8 flags the `dressage-proxy` bin runs with (its shebang): the proxy is measured as deployed,
// and the pass-through gets the same runtime so the comparison stays like for like.
const serverNodeFlags = proxyNodeFlags;

/** Starts `bench-servers.ts <role> ...args` and resolves with its URL once it prints `ready`. */
export function startServer(role: string, ...args: string[]): Promise<{ child: ChildProcess; url: string }> {
  return spawnServer('bench/bench-servers.ts', serverNodeFlags, role, args);
}

/**
 * Bundles a bench script (TypeScript, with the workspace's packages from source) into one ES module
 * that plain `node` runs, and returns its path. A server measured for memory runs that: TypeScript
 * through tsx's loader runs a second V8 isolate in the process (Node's module-hooks thread), 40 to
 * 60 MiB of resident memory that the deployed `dressage-proxy` bin does not have.
 */
export async function bundleScript(script: string): Promise<string> {
  const outDir = join(packageRoot, 'node_modules', '.cache', 'dressage-bench');
  const name = basename(script, extname(script));
  await build({
    config: false,
    entry: { [name]: join(packageRoot, script) },
    outDir,
    format: ['esm'],
    platform: 'node',
    target: 'node20',
    splitting: false,
    sourcemap: false,
    dts: false,
    silent: true,
    // The workspace's packages from their sources, as the tsx runs see them; npm packages stay
    // external and load from node_modules as in a deployment.
    noExternal: [/^@dressage\//],
    esbuildOptions(options) {
      options.conditions = ['@dressage/source'];
    },
  });
  return join(outDir, `${name}.js`);
}

/**
 * Starts `<script> <role> ...args` with these V8 flags and resolves with its URL once it prints
 * `ready`: a TypeScript script through tsx, a bundle (see {@link bundleScript}) as it is.
 */
export function spawnServer(
  script: string,
  nodeFlags: readonly string[],
  role: string,
  args: readonly string[],
): Promise<{ child: ChildProcess; url: string }> {
  const loader = script.endsWith('.ts') ? ['--conditions=@dressage/source', '--import', 'tsx'] : [];
  const child = spawn(process.execPath, [...nodeFlags, ...loader, script, role, ...args], {
    cwd: packageRoot,
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
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
