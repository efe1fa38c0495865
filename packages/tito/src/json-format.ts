/**
 * JSON the way chat templates print it (`tojson` in Jinja, `json.dumps` in Python): `", "` between
 * items, `": "` after keys, keys in insertion order, non-ASCII characters kept as they are.
 */
export function toTemplateJson(value: unknown): string {
  return writeJson(value, ', ', ': ', false);
}

/**
 * Canonical JSON for comparisons and hashes: keys sorted, no whitespace. Two values that mean the
 * same thing serialise to the same string whatever their key order.
 */
export function toCanonicalJson(value: unknown): string {
  return writeJson(value, ',', ':', true);
}

function writeJson(value: unknown, itemSeparator: string, keySeparator: string, sortKeys: boolean): string {
  if (value === null || value === undefined) return 'null';
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'number':
      // NaN and Infinity have no JSON spelling; JSON.stringify's null is the safe choice.
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'bigint':
      return value.toString();
    case 'object': {
      if (Array.isArray(value)) {
        return `[${value.map((item) => writeJson(item, itemSeparator, keySeparator, sortKeys)).join(itemSeparator)}]`;
      }
      const keys = Object.keys(value).filter((key) => (value as Record<string, unknown>)[key] !== undefined);
      if (sortKeys) keys.sort();
      const entries = keys.map(
        (key) =>
          `${JSON.stringify(key)}${keySeparator}${writeJson((value as Record<string, unknown>)[key], itemSeparator, keySeparator, sortKeys)}`,
      );
      return `{${entries.join(itemSeparator)}}`;
    }
    default:
      return 'null';
  }
}
