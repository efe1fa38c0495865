import { createHash } from 'node:crypto';

function dropNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(dropNulls);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, inner] of Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      if (inner === null || inner === undefined) continue;
      out[key] = dropNulls(inner);
    }
    return out;
  }
  return value;
}

/**
 * sha256 of canonical JSON (sorted keys, null-valued keys dropped): the identity of a registration
 * or a turn's messages, so a retried request is recognised as the same one.
 */
export function fingerprintOf(value: unknown): string {
  return createHash('sha256')
    .update(JSON.stringify(dropNulls(value)))
    .digest('hex');
}
