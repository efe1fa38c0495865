import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A small mounted tmpfs: a disk that really fills up. */
export interface Tmpfs {
  path: string;
  unmount(): void;
}

/** Mounts a tmpfs of `bytes`, or returns null where this machine does not allow it (not root). */
export function mountTmpfs(bytes: number): Tmpfs | null {
  const path = mkdtempSync(join(tmpdir(), 'dressage-tmpfs-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${bytes}`, 'tmpfs', path], { stdio: 'ignore' });
  } catch {
    rmSync(path, { recursive: true, force: true });
    return null;
  }
  return {
    path,
    unmount() {
      execFileSync('umount', [path], { stdio: 'ignore' });
      rmSync(path, { recursive: true, force: true });
    },
  };
}
