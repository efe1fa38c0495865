import { createServer } from 'node:net';
import { DressageError } from '@dressage/protocol';

function free(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
}

/**
 * A base port `b` such that `b … b + count - 1` are free on `host` right now, for
 * `LocalBwrapPool`'s `basePort` (slot `i` listens on `basePort + i`). Another process may still take
 * one before the pool does; this only avoids the ports already in use. Ports come from
 * `[from, to)` (default 20000-60000).
 */
export async function findFreePortRange(
  count: number,
  options: { host?: string; from?: number; to?: number } = {},
): Promise<number> {
  const host = options.host ?? '127.0.0.1';
  const from = options.from ?? 20_000;
  const to = options.to ?? 60_000;
  // Bases run from `from` to `to - count`; start at a random one so that concurrent callers spread out.
  const span = Math.max(to - from - count + 1, 0);
  const start = Math.floor(Math.random() * span);
  for (let attempt = 0; attempt < Math.min(span, 200); attempt++) {
    const base = from + ((start + attempt) % span);
    let ok = true;
    for (let offset = 0; offset < count && ok; offset++) ok = await free(base + offset, host);
    if (ok) return base;
  }
  throw new DressageError({
    code: 'resource_exhausted',
    message: `no ${count} consecutive free ports between ${from} and ${to} on ${host}`,
  });
}
