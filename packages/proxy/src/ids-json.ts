// Token ids as JSON bytes, written straight from the typed array. The engine's `/generate` body is
// mostly `input_ids`, and a long conversation has tens of thousands of them: each id's digits and
// comma come from a table of the ids seen so far (two 4-byte stores an id, instead of a division per
// two digits), and nothing is kept between requests but that table (a session holds its ids once,
// in its token buffer).

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

// Ids below this have their digits and a comma tabled: every vocabulary of the models served.
const tabledIds = 1 << 18;
// Per tabled id, side by side in one array (one cache line read per id): its digits then a comma as
// the little-endian bytes of two words, and in the eighth byte, which a tabled id (at most six digits
// and a comma) never uses, how many of the eight count (0 until the id is first written). 2 MB,
// written only where used.
const table = new Uint32Array(2 * tabledIds);
function tableEntry(id: number): void {
  const bytes = new Uint8Array(8);
  const length = digitCount(id);
  writeDigits(bytes, id, length);
  bytes[length] = comma;
  bytes[7] = length + 1;
  const words = new DataView(bytes.buffer);
  table[2 * id] = words.getUint32(0, true);
  table[2 * id + 1] = words.getUint32(4, true);
}

/**
 * Bytes of `before`, the ids as comma-separated decimals, then `after` (`before` and `after` are
 * UTF-8): the JSON of a body with the ids array in it, e.g. `{"input_ids":[` … `],"rid":"…"}`.
 */
export function idsJson(before: string, ids: Int32Array, after: string): Buffer {
  // Room for tabled ids (at most six digits and a comma), with 8 bytes of slack after the last id
  // since a tabled id writes 8 bytes and moves on by its length; an id outside the table (rare:
  // none of a vocabulary's) makes room for itself and the rest when it comes.
  const afterLength = Buffer.byteLength(after);
  let out = Buffer.allocUnsafe(Buffer.byteLength(before) + ids.length * 7 + 8 + afterLength);
  let words = new DataView(out.buffer, out.byteOffset, out.byteLength);
  let position = out.write(before, 0);
  for (let index = 0; index < ids.length; index++) {
    let value = ids[index]!;
    if (value >= 0 && value < tabledIds) {
      let high = table[2 * value + 1]!;
      if (high === 0) {
        tableEntry(value);
        high = table[2 * value + 1]!;
      }
      // The eighth byte (the length) lands where the next id or `after` overwrites it.
      words.setUint32(position, table[2 * value]!, true);
      words.setUint32(position + 4, high, true);
      position += high >>> 24;
      continue;
    }
    // A minus, ten digits and a comma at most, then the rest as tabled ids.
    const needed = position + 12 + (ids.length - index - 1) * 7 + 8 + afterLength;
    if (needed > out.length) {
      // With room for a few more like it, so a run of them does not copy at every one.
      const larger = Buffer.allocUnsafe(needed + 12 * 8);
      out.copy(larger, 0, 0, position);
      out = larger;
      words = new DataView(out.buffer, out.byteOffset, out.byteLength);
    }
    if (value < 0) {
      out[position++] = minus;
      value = -value;
    }
    const end = position + digitCount(value);
    writeDigits(out, value, end);
    out[end] = comma;
    position = end + 1;
  }
  // The last id's comma gives way to `after`.
  if (ids.length > 0) position--;
  position += out.write(after, position);
  return out.subarray(0, position);
}
