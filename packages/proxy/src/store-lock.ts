import { type DirectoryLock, lockDirectory } from './directory-lock.js';

/** The exclusive hold of one process on a store directory (see {@link lockStoreDirectory}). */
export type StoreLock = DirectoryLock;

/**
 * Takes an exclusive lock on `<directory>/LOCK`, or refuses: one process per store. Two processes
 * appending to one log would each overwrite the other's lines, and each would answer 200 for
 * trajectories a restart no longer finds. See {@link lockDirectory}.
 *
 * @throws DressageError `failed_precondition` naming the directory and the holder's pid when another
 *   process (or another store of this one) holds it; `unavailable` when `flock` is not installed.
 */
export function lockStoreDirectory(directory: string): StoreLock {
  return lockDirectory(directory, {
    file: 'LOCK',
    subject: `the trajectory store ${directory}`,
    remedy: 'one process per store: stop that process, or give this one its own --store-dir',
  });
}
