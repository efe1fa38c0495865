import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DressageError } from '@dressage/protocol';
import type { SlotServer } from '@dressage/sandbox';

/** The directory above `path` that holds the outermost `node_modules` (a workspace or install root). */
export function findInstallRoot(path: string): string {
  let current = dirname(path);
  let root = current;
  while (true) {
    if (existsSync(join(current, 'node_modules'))) root = current;
    const parent = dirname(current);
    if (parent === current) return root;
    current = parent;
  }
}

/** The built `dressage-blackbox-server` script of this package, from source or from dist. */
export function defaultServerScript(): string {
  const candidates = [
    new URL('./bin/dressage-blackbox-server.js', import.meta.url),
    new URL('../../dist/bin/dressage-blackbox-server.js', import.meta.url),
    new URL('../dist/bin/dressage-blackbox-server.js', import.meta.url),
  ];
  for (const candidate of candidates) {
    const path = fileURLToPath(candidate);
    if (existsSync(path)) return path;
  }
  throw new DressageError({
    code: 'failed_precondition',
    message: 'dressage-blackbox-server is not built: run `pnpm --filter @dressage/paddock build`',
  });
}

/**
 * The BlackboxServer as the server of every slot of a `blackbox` sandbox pool: this package's
 * `dressage-blackbox-server`, run by node, with its install root bound read-only into the slot.
 *
 * @example
 * ```ts
 * const pool = new LocalBwrapPool({ mode: 'blackbox', server: blackboxSlotServer() });
 * ```
 */
export function blackboxSlotServer(): SlotServer {
  const script = defaultServerScript();
  return {
    command: ['/usr/bin/env', 'node', script],
    readOnlyMounts: [findInstallRoot(script)],
    // Between leases the server stays up and keeps its agent warm (`agent_reuse`).
    recyclePath: '/v1/rollout/recycle',
  };
}
