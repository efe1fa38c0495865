import { type ChildProcess, spawn } from 'node:child_process';

/** A server started as a child process, once it printed its `listening on http://…` line. */
export interface ServerProcess {
  child: ChildProcess;
  /** The URL from the listening line. */
  url: string;
  /** The listening line itself. */
  line: string;
  output(): string;
  /** SIGKILL, resolved once it is gone. */
  kill(): Promise<void>;
}

/** Runs `node script ...args` and resolves once it prints `listening on http://…`. */
export function startServerProcess(
  script: string,
  args: readonly string[],
  options: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
): Promise<ServerProcess> {
  const child = spawn(process.execPath, [script, ...args], {
    env: options.env ?? process.env,
    cwd: options.cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  const kill = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  return new Promise((resolve, reject) => {
    const onData = (data: Buffer) => {
      text += data.toString();
      const line = text.split('\n').find((candidate) => /listening on http:\/\/\S+/.test(candidate));
      if (line !== undefined) {
        const url = (/listening on (http:\/\/\S+)/.exec(line) as RegExpExecArray)[1] as string;
        resolve({ child, url, line, output: () => text, kill });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}: ${text}`)));
  });
}

/** The status of a GET, or the connection error code when nothing answered. */
export async function statusOf(url: string, headers: Record<string, string> = {}): Promise<number | string> {
  try {
    const response = await fetch(url, { headers, signal: AbortSignal.timeout(5000) });
    await response.arrayBuffer();
    return response.status;
  } catch (error) {
    return String((error as { cause?: { code?: string } }).cause?.code ?? error);
  }
}
