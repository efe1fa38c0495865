import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { LimitSupport } from './resource-limits.js';

/** Lifecycle states of a pool slot. */
export type SlotState =
  | 'empty'
  | 'starting'
  | 'ready'
  | 'leased'
  | 'releasing'
  | 'resetting'
  | 'restarting'
  | 'failed'
  | 'dead'
  | 'lost';

/**
 * `blackbox`: every slot runs a server (the BlackboxServer), reached at `basePort + slot` on the
 * host; each server requires its slot's own bearer token, which only the pool and the lease holder
 * know. By default the slot has its own network namespace, and the pool's socket pipes are its only
 * ways in and out. `command_only`: no server; commands and files go through the pool.
 */
export type PoolMode = 'blackbox' | 'command_only';

/** One slot in {@link PoolStatus}. */
export interface SlotStatus {
  slotId: number;
  state: SlotState;
  generation: number;
  trajectoryId: string | null;
  port: number;
  error: string | null;
}

/** A snapshot of the pool. */
export interface PoolStatus {
  pid: number;
  mode: PoolMode;
  baseDir: string;
  slots: SlotStatus[];
  counts: Partial<Record<SlotState, number>>;
  limits: LimitSupport;
  leases: number;
}

/** The contents of `<baseDir>/pool.json`: the pool's last status and when it was written. */
export type PersistedPoolState = PoolStatus & { updatedAt: string };

/**
 * The pool's persisted state, `<baseDir>/pool.json`, through which another process (the
 * `dressage-local-bwrap status|stop` command) finds a running pool. Writes are queued, each one
 * replacing the file atomically; a failed write is skipped (the next one tries again).
 */
export class PoolStateFile {
  readonly path: string;
  #writes: Promise<void> = Promise.resolve();

  constructor(baseDir: string) {
    this.path = join(baseDir, 'pool.json');
  }

  /** Queues a write of `status`. */
  write(status: PoolStatus): void {
    const text = `${JSON.stringify({ ...status, updatedAt: new Date().toISOString() }, null, 2)}\n`;
    this.#writes = this.#writes
      .then(() => writeFile(`${this.path}.tmp`, text))
      .then(() => rename(`${this.path}.tmp`, this.path))
      .catch(() => undefined);
  }

  /** Resolves when every queued write has finished. */
  flushed(): Promise<void> {
    return this.#writes;
  }
}

/** The state a pool in `baseDir` last wrote, or null when there is none. */
export async function readPoolState(baseDir: string): Promise<PersistedPoolState | null> {
  try {
    return JSON.parse(await readFile(join(baseDir, 'pool.json'), 'utf8')) as PersistedPoolState;
  } catch {
    return null;
  }
}
