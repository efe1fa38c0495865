// The proxy binary as an operator starts it: where it listens, what it logs, where its key comes from.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { qwen35ChatTemplatePath, qwenModelDirectory } from './__fixtures__/harness.js';

const binary = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'bin', 'dressage-proxy.js');

/** A non-loopback IPv4 address of this machine, if it has one. */
function externalAddress(): string | null {
  for (const addresses of Object.values(networkInterfaces())) {
    for (const address of addresses ?? []) {
      if (address.family === 'IPv4' && !address.internal) return address.address;
    }
  }
  return null;
}

async function reachable(url: string, headers: Record<string, string> = {}): Promise<number | string> {
  try {
    const response = await fetch(url, { headers, signal: AbortSignal.timeout(5000) });
    await response.arrayBuffer();
    return response.status;
  } catch (error) {
    return String((error as { cause?: { code?: string } }).cause?.code ?? error);
  }
}

describe('dressage-proxy binds and authenticates', () => {
  let directory: string;
  let child: ChildProcess | null = null;

  beforeAll(() => {
    if (!existsSync(binary)) throw new Error(`${binary} is missing: build @dressage/proxy first`);
    directory = mkdtempSync(join(tmpdir(), 'proxy-bind-'));
  });
  afterAll(() => rmSync(directory, { recursive: true, force: true }));
  afterEach(() => {
    child?.kill('SIGKILL');
    child = null;
  });

  // Starts the binary and waits for its "listening on" line; returns that line.
  async function start(args: string[], env: Record<string, string> = {}): Promise<string> {
    const started = spawn(
      process.execPath,
      [
        binary,
        '--tokenizer-path',
        qwenModelDirectory,
        '--chat-template',
        qwen35ChatTemplatePath,
        '--store-dir',
        'none',
        '--port',
        '0',
        ...args,
      ],
      { env: { ...process.env, DRESSAGE_PROXY_API_KEY: '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = started;
    let output = '';
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no listening line: ${output}`)), 60_000);
      const take = (chunk: Buffer) => {
        output += chunk.toString('utf8');
        const line = output.split('\n').find((text) => text.includes('listening on'));
        if (line !== undefined) {
          clearTimeout(timer);
          resolve(line);
        }
      };
      started.stdout?.on('data', take);
      started.stderr?.on('data', take);
      started.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`exited ${code}: ${output}`));
      });
    });
  }

  const portOf = (line: string) => Number(/listening on http:\/\/[^ ]+:(\d+)/.exec(line)?.[1]);

  it('listens on loopback only by default and says so', async () => {
    const line = await start([]);
    expect(line).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+ \(no auth/);
    const port = portOf(line);
    expect(await reachable(`http://127.0.0.1:${port}/health`)).toBe(200);
    const external = externalAddress();
    if (external === null) console.warn('no non-loopback interface here: the outside probe is skipped');
    else expect(await reachable(`http://${external}:${port}/health`)).toBe('ECONNREFUSED');
  });

  it('logs the wildcard address it really binds when told to listen everywhere', async () => {
    const line = await start(['--host', '0.0.0.0']);
    expect(line).toMatch(/listening on http:\/\/0\.0\.0\.0:\d+ \(reached here at http:\/\/127\.0\.0\.1:\d+;/);
    const external = externalAddress();
    if (external !== null) expect(await reachable(`http://${external}:${portOf(line)}/health`)).toBe(200);
  });

  it('takes the key from a file or the environment, never needing argv', async () => {
    const keyFile = join(directory, 'key');
    writeFileSync(keyFile, 'file-key\n', { mode: 0o600 });
    const fromFile = await start(['--api-key-file', keyFile]);
    expect(fromFile).toContain('bearer key required');
    const port = portOf(fromFile);
    expect(await reachable(`http://127.0.0.1:${port}/v1/models`)).toBe(401);
    expect(await reachable(`http://127.0.0.1:${port}/v1/models`, { authorization: 'Bearer wrong' })).toBe(
      401,
    );
    expect(await reachable(`http://127.0.0.1:${port}/v1/models`, { authorization: 'Bearer file-key' })).toBe(
      200,
    );
    child?.kill('SIGKILL');
    const fromEnv = await start([], { DRESSAGE_PROXY_API_KEY: 'env-key' });
    const envPort = portOf(fromEnv);
    expect(await reachable(`http://127.0.0.1:${envPort}/v1/models`)).toBe(401);
    expect(
      await reachable(`http://127.0.0.1:${envPort}/v1/models`, { authorization: 'Bearer env-key' }),
    ).toBe(200);
  });
});
