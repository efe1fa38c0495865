import { constants } from 'node:fs';
import { access, realpath } from 'node:fs/promises';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import { BlackboxHttpError } from './http-error.js';

// A register request names files and directories the server reads and writes: they must lie in the
// sandbox's own tree, so a caller cannot make the server read host files such as `/etc/shadow`.

function isInside(root: string, path: string): boolean {
  const rest = relative(root, path);
  return rest === '' || (rest !== '..' && !rest.startsWith(`..${sep}`) && !isAbsolute(rest));
}

/** The distinct real paths of `roots` (a root that does not exist yet is kept as given). */
async function realRoots(roots: readonly string[]): Promise<string[]> {
  const resolved = await Promise.all(roots.map((root) => realpath(root).catch(() => resolve(root))));
  return [...new Set(resolved)];
}

/**
 * Resolves `file` (symlinks included) and refuses it (400 naming `field`) unless it is an absolute,
 * readable file inside one of `roots`.
 */
export async function ownFile(file: string, field: string, roots: readonly string[]): Promise<string> {
  const refuse = (why: string) =>
    new BlackboxHttpError({
      status: 400,
      error: 'request_error',
      message: `${field} ${why}`,
      details: {
        errors: [{ path: field, message: why }],
      },
    });
  if (!isAbsolute(file)) throw refuse('must be an absolute path');
  let resolved: string;
  try {
    resolved = await realpath(file);
    await access(resolved, constants.R_OK);
  } catch {
    throw refuse('must be a readable file');
  }
  const real = await realRoots(roots);
  if (!real.some((root) => isInside(root, resolved))) {
    throw refuse(`must resolve inside the server's work dir or runtime root (${real.join(', ')})`);
  }
  return resolved;
}

/** Like {@link ownFile} for a directory the server will create things in (it need not exist yet). */
export async function ownDirectory(
  directory: string,
  field: string,
  roots: readonly string[],
): Promise<void> {
  let existing = resolve(directory);
  let resolved: string | null = null;
  while (resolved === null) {
    try {
      resolved = join(await realpath(existing), relative(existing, resolve(directory)));
    } catch {
      const parent = resolve(existing, '..');
      if (parent === existing) break;
      existing = parent;
    }
  }
  const real = await realRoots(roots);
  if (resolved === null || !real.some((root) => isInside(root, resolved))) {
    throw new BlackboxHttpError({
      status: 400,
      error: 'request_error',
      message: `${field} must resolve inside the server's work dir or runtime root (${real.join(', ')})`,
      details: { errors: [{ path: field, message: 'outside the server tree' }] },
    });
  }
}
