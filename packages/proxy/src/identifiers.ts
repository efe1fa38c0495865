// Session, instance and turn ids travel in HTTP headers (ours to the engine's router, the agent's to
// us), which carry Latin-1 text without control characters. An id that cannot be a header is a
// client error, named when it arrives, not an engine failure later.

const longestIdentifier = 512;

/** Why `value` cannot be an id, or null when it can: 1–512 printable Latin-1 characters. */
export function identifierProblem(value: string): string | null {
  if (value.length === 0) return 'is empty';
  if (value.length > longestIdentifier) return `is longer than ${longestIdentifier} characters`;
  for (let index = 0; index < value.length; index++) {
    const code = value.charCodeAt(index);
    if (code < 0x20 || code === 0x7f || (code >= 0x80 && code < 0xa0)) {
      return `contains the control character U+${code.toString(16).padStart(4, '0').toUpperCase()} at ${index}`;
    }
    if (code > 0xff) {
      return `contains ${JSON.stringify(value[index])} at ${index}, outside Latin-1 (ids travel in HTTP headers)`;
    }
  }
  return null;
}
