// Token ids as JSON bytes, written straight from the typed array. The engine's `/generate` body is
// mostly `input_ids`, and a long conversation has tens of thousands of them: writing their digits
// into one buffer is several times faster than `Int32Array.prototype.join`, and nothing is kept
// between requests (a session holds its ids once, in its token buffer).

const comma = 0x2c;
const minus = 0x2d;
const zero = 0x30;

// The two ASCII digits of 0–99, for writing two digits per division.
const digitPairs = new Uint8Array(200);
for (let value = 0; value < 100; value++) {
  digitPairs[2 * value] = zero + Math.floor(value / 10);
  digitPairs[2 * value + 1] = zero + (value % 10);
}

function digitCount(value: number): number {
  let count = 1;
  while (value >= 10) {
    value = Math.floor(value / 10);
    count++;
  }
  return count;
}

// Writes the decimal digits of `value` (0 ≤ value < 2^31) ending just before `end`.
function writeDigits(out: Uint8Array, value: number, end: number): void {
  let position = end;
  while (value >= 100) {
    const next = (value / 100) | 0;
    const pair = (value - next * 100) << 1;
    out[--position] = digitPairs[pair + 1]!;
    out[--position] = digitPairs[pair]!;
    value = next;
  }
  if (value >= 10) {
    out[--position] = digitPairs[(value << 1) + 1]!;
    out[--position] = digitPairs[value << 1]!;
  } else {
    out[--position] = zero + value;
  }
}

/**
 * Bytes of `before`, the ids as comma-separated decimals, then `after` (`before` and `after` are
 * UTF-8): the JSON of a body with the ids array in it, e.g. `{"input_ids":[` … `],"rid":"…"}`.
 */
export function idsJson(before: string, ids: Int32Array, after: string): Buffer {
  // The largest magnitude (and a sign) bounds every id's width: one pass, then one allocation.
  let largest = 0;
  let sign = 0;
  for (let index = 0; index < ids.length; index++) {
    const value = ids[index]!;
    if (value > largest) largest = value;
    else if (-value > largest) largest = -value;
    if (value < 0) sign = 1;
  }
  const widest = digitCount(largest) + sign + 1;
  const beforeLength = Buffer.byteLength(before);
  const out = Buffer.allocUnsafe(beforeLength + ids.length * widest + Buffer.byteLength(after));
  let position = out.write(before, 0);
  for (let index = 0; index < ids.length; index++) {
    if (index > 0) out[position++] = comma;
    let value = ids[index]!;
    if (value < 0) {
      out[position++] = minus;
      value = -value;
    }
    const end =
      position +
      (value < 10
        ? 1
        : value < 100
          ? 2
          : value < 1000
            ? 3
            : value < 10_000
              ? 4
              : value < 100_000
                ? 5
                : value < 1_000_000
                  ? 6
                  : digitCount(value));
    writeDigits(out, value, end);
    position = end;
  }
  position += out.write(after, position);
  return out.subarray(0, position);
}
