import { isIP } from 'node:net';

/** Whether a listen address or host name stays on this machine (127.0.0.0/8, ::1, localhost). */
export function isLoopbackAddress(host: string): boolean {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  const lower = bare.toLowerCase();
  if (lower === 'localhost' || lower.endsWith('.localhost')) return true;
  if (isIP(lower) === 4) return lower.startsWith('127.');
  if (isIP(lower) === 6) return lower === '::1' || lower.startsWith('::ffff:127.');
  return false;
}

/**
 * The host name of an HTTP `Host` header without its port (`[::1]:8080` gives `::1`), or null when
 * the header is missing or malformed.
 */
export function hostHeaderName(header: string | undefined): string | null {
  if (header === undefined || header === '') return null;
  if (header.startsWith('[')) {
    const end = header.indexOf(']');
    if (end < 0) return null;
    const rest = header.slice(end + 1);
    if (rest !== '' && !/^:\d+$/.test(rest)) return null;
    return header.slice(1, end);
  }
  const colon = header.indexOf(':');
  const name = colon < 0 ? header : header.slice(0, colon);
  if (colon >= 0 && !/^\d+$/.test(header.slice(colon + 1))) return null;
  return name === '' ? null : name;
}

/** The address a server listening on `host` is reached at here (a wildcard address means loopback). */
export function reachableHost(host: string): string {
  if (host === '0.0.0.0' || host === '') return '127.0.0.1';
  if (host === '::' || host === '[::]') return '[::1]';
  return isIP(host) === 6 ? `[${host}]` : host;
}
