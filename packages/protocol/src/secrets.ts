import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { DressageError } from './errors.js';

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/**
 * Whether a presented secret equals the expected one, in time that does not depend on where they
 * differ or on their lengths: both sides are hashed to fixed-length digests first, which
 * `timingSafeEqual` then compares.
 */
export function secretsEqual(presented: string, expected: string): boolean {
  return timingSafeEqual(digest(presented), digest(expected));
}

/**
 * Whether an `Authorization` header carries `Bearer <expected>`, compared in constant time. A missing
 * header or another scheme is compared too (against a value that cannot match), so a wrong key and a
 * missing one take the same time.
 */
export function bearerMatches(authorization: string | undefined, expected: string): boolean {
  const presented = authorization?.startsWith('Bearer ')
    ? authorization.slice(7)
    : `\0${authorization ?? ''}`;
  return secretsEqual(presented, expected);
}

/** Where a secret may come from, in order of precedence. */
export interface SecretSources {
  /** A value given directly (a command-line flag: visible to `ps`, so the other sources are preferred). */
  value?: string | undefined;
  /**
   * A file holding the secret; surrounding whitespace (a trailing newline) is dropped. `/dev/stdin`
   * reads standard input to its end (a parent can hand a secret over without argv, environment or
   * file; read through the descriptor, since a socket behind /dev/stdin cannot be opened by path).
   */
  file?: string | undefined;
  /** A value from an environment variable. */
  environment?: string | undefined;
  /** Names the setting in errors, e.g. `--api-key-file`. */
  label: string;
}

/**
 * Reads a secret from a direct value, a file or an environment variable (the first one set).
 * Returns undefined when none is set.
 *
 * @throws DressageError `invalid_argument` when the file cannot be read or holds an empty secret.
 */
export function readSecret(sources: SecretSources): string | undefined {
  if (sources.value !== undefined && sources.value !== '') return sources.value;
  if (sources.file !== undefined && sources.file !== '') {
    let text: string;
    try {
      text = readFileSync(sources.file === '/dev/stdin' ? 0 : sources.file, 'utf8');
    } catch (error) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `${sources.label}: cannot read ${sources.file}: ${(error as Error).message}`,
        details: { setting: sources.label },
        cause: error,
      });
    }
    const secret = text.trim();
    if (secret === '') {
      throw new DressageError({
        code: 'invalid_argument',
        message: `${sources.label}: ${sources.file} is empty`,
        details: { setting: sources.label },
      });
    }
    return secret;
  }
  if (sources.environment !== undefined && sources.environment !== '') return sources.environment;
  return undefined;
}
