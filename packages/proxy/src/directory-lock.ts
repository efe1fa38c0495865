import { spawnSync } from 'node:child_process';
import { closeSync, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';

/** The exclusive hold of one process on a directory (see {@link lockDirectory}). */
export interface DirectoryLock {
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

/** What {@link lockDirectory} locks, and what its refusal says. */
export interface LockDirectoryOptions {
  /** The lock file's name inside the directory. */
  file: string;
  /** What the directory is, for messages: `the trajectory store /data/store`. */
  subject: string;
  /** What a refused caller can do: `stop that process, or give this one its own --store-dir`. */
  remedy: string;
}

/**
 * Takes an exclusive `flock(2)` on `<directory>/<file>`, or refuses: one process per directory.
 *
 * Node has no flock of its own, so util-linux's `flock` takes it on a descriptor this process
 * opened and lends to it: the lock belongs to the open file description, which this process keeps
 * after `flock` exits. The kernel drops it when that description closes, so a process that dies,
 * even by SIGKILL, leaves no stale lock behind. The holder's pid is written into the file for the
 * message a second process gets.
 *
 * @throws DressageError `failed_precondition` naming the directory and the holder's pid when another
 *   process (or another holder in this one) holds it; `unavailable` when `flock` is not installed.
 */
export function lockDirectory(directory: string, options: LockDirectoryOptions): DirectoryLock {
  const path = join(directory, options.file);
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
        message: `cannot lock ${options.subject}: util-linux flock is needed (${result.error.message})`,
        cause: result.error,
      });
    }
    throw new DressageError({
      code: 'failed_precondition',
      message: `${options.subject} is in use by ${holderOf(path)} (${options.remedy})`,
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
