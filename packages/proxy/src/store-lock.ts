import { spawnSync } from 'node:child_process';
import { closeSync, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';

const lockName = 'LOCK';

/** The exclusive hold of one process on a store directory (see {@link lockStoreDirectory}). */
export interface StoreLock {
  /** The lock file. */
  readonly path: string;
  /** Lets go of the directory. */
  release(): void;
}

function holderOf(path: string): string {
  try {
    const holder = JSON.parse(readFileSync(path, 'utf8')) as { pid?: unknown };
    return typeof holder.pid === 'number' ? `process ${holder.pid}` : 'another process';
  } catch {
    return 'another process';
  }
}

/**
 * Takes an exclusive `flock(2)` on `<directory>/LOCK`, or refuses: one process per store. Two
 * processes appending to one log would each overwrite the other's lines, and each would answer 200
 * for trajectories a restart no longer finds.
 *
 * Node has no flock of its own, so util-linux's `flock` takes it on a descriptor this process
 * opened and lends to it: the lock belongs to the open file description, which this process keeps
 * after `flock` exits. The kernel drops it when that description closes, so a process that dies,
 * even by SIGKILL, leaves no stale lock behind. The holder's pid is written into the file for the
 * message a second process gets.
 *
 * @throws DressageError `failed_precondition` naming the directory and the holder's pid when another
 *   process (or another store of this one) holds it; `unavailable` when `flock` is not installed.
 */
export function lockStoreDirectory(directory: string): StoreLock {
  const path = join(directory, lockName);
  const descriptor = openSync(path, 'a+');
  let result: ReturnType<typeof spawnSync>;
  try {
    result = spawnSync('flock', ['--exclusive', '--nonblock', '3'], {
      stdio: ['ignore', 'ignore', 'pipe', descriptor],
    });
  } catch (error) {
    closeSync(descriptor);
    throw error;
  }
  if (result.error !== undefined || result.status !== 0) {
    closeSync(descriptor);
    if (result.error !== undefined) {
      throw new DressageError({
        code: 'unavailable',
        message: `cannot lock the trajectory store ${directory}: util-linux flock is needed (${result.error.message})`,
        cause: result.error,
      });
    }
    throw new DressageError({
      code: 'failed_precondition',
      message: `the trajectory store ${directory} is in use by ${holderOf(path)}: one process per store (stop that process, or give this one its own --store-dir)`,
      details: { directory, lock: path },
    });
  }
  ftruncateSync(descriptor, 0);
  writeSync(descriptor, `${JSON.stringify({ pid: process.pid, since: new Date().toISOString() })}\n`);
  let held = true;
  return {
    path,
    release() {
      if (!held) return;
      held = false;
      closeSync(descriptor);
    },
  };
}
