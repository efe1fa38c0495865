import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startSocketPipe } from './socket-pipe.js';

/** GET `/` over a unix socket. */
function getOverSocket(socketPath: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sent = request({ socketPath, path: '/', headers: { host: 'upstream' } }, (response) => {
      let text = '';
      response.on('data', (chunk: Buffer) => {
        text += chunk.toString('utf8');
      });
      response.on('end', () => resolve(`${response.statusCode} ${text}`));
    });
    sent.on('error', reject);
    sent.end();
  });
}

describe('startSocketPipe', () => {
  let directory: string;
  let upstream: Server;
  let upstreamPort: number;

  beforeEach(async () => {
    directory = mkdtempSync(join(tmpdir(), 'paddock-pipe-'));
    upstream = createServer((incoming, response) => response.end(`upstream saw ${incoming.url}`));
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    upstreamPort = (upstream.address() as AddressInfo).port;
  });
  afterEach(async () => {
    upstream.closeAllConnections();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
    rmSync(directory, { recursive: true, force: true });
  });

  it('carries HTTP from a unix socket to its one TCP target, and back out to TCP', async () => {
    const socketPath = join(directory, 'upstream.sock');
    const inward = await startSocketPipe({
      listen: { path: socketPath },
      target: { host: '127.0.0.1', port: upstreamPort },
    });
    // Only the owner may connect to the socket.
    expect(statSync(socketPath).mode & 0o777).toBe(0o600);
    expect(await getOverSocket(socketPath)).toBe('200 upstream saw /');
    // The other direction, as a slot server's LLM proxy uses it: a loopback port piped to the socket.
    const outward = await startSocketPipe({
      listen: { host: '127.0.0.1', port: 0 },
      target: { path: socketPath },
    });
    expect(outward.port).toBeGreaterThan(0);
    const response = await fetch(`http://127.0.0.1:${outward.port}/v1/models`);
    expect(await response.text()).toBe('upstream saw /v1/models');
    await outward.close();
    await inward.close();
    await expect(getOverSocket(socketPath)).rejects.toThrow();
  });

  it('replaces a stale socket file and reports a target that is down as a cut connection', async () => {
    const socketPath = join(directory, 'server.sock');
    // Left behind by a pool that crashed: listening there would fail with EADDRINUSE.
    writeFileSync(socketPath, '');
    const pipe = await startSocketPipe({
      listen: { path: socketPath },
      target: { path: join(directory, 'none') },
    });
    await expect(getOverSocket(socketPath)).rejects.toThrow();
    await pipe.close();
  });
});
