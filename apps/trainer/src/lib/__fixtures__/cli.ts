// Runs the `dressage` CLI as its operator would: a child process, no stdin, no terminal.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The trainer app's folder (the CLI's working directory). */
export const appDirectory = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/**
 * Runs `dressage ARGS...` to its end, in `cwd` (default the app's folder): its exit code and
 * everything it wrote.
 */
export function runCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = appDirectory,
): Promise<{ code: number | null; output: string }> {
  const child = spawn(
    process.execPath,
    [
      '--conditions=@dressage/source',
      '--import',
      'tsx',
      join(appDirectory, 'src', 'bin', 'dressage.ts'),
      ...args,
    ],
    { cwd, stdio: ['ignore', 'pipe', 'pipe'], env },
  );
  let output = '';
  child.stdout.on('data', (chunk) => {
    output += String(chunk);
  });
  child.stderr.on('data', (chunk) => {
    output += String(chunk);
  });
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, output })));
}
