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
// Per tabled id: its digits then a comma, as the little-endian bytes of two words, and how many of
// those 8 bytes count (0 until the id is first written). About 2.3 MB, written only where used.
const tableLow = new Uint32Array(tabledIds);
const tableHigh = new Uint32Array(tabledIds);
const tableLength = new Uint8Array(tabledIds);
function tableEntry(id: number): void {
  const bytes = new Uint8Array(8);
  const length = digitCount(id);
  writeDigits(bytes, id, length);
  bytes[length] = comma;
  const words = new DataView(bytes.buffer);
  tableLow[id] = words.getUint32(0, true);
  tableHigh[id] = words.getUint32(4, true);
  tableLength[id] = length + 1;
}

/**
 * Bytes of `before`, the ids as comma-separated decimals, then `after` (`before` and `after` are
 * UTF-8): the JSON of a body with the ids array in it, e.g. `{"input_ids":[` … `],"rid":"…"}`.
 */
export function idsJson(before: string, ids: Int32Array, after: string): Buffer {
  // The widest id bounds every id's width (tabled ones take at most six digits and a comma): one
  // pass, then one allocation, with 8 bytes of slack after the last id, since a tabled id writes 8
  // bytes and moves on by its length.
  let widest = 7;
  for (let index = 0; index < ids.length; index++) {
    const value = ids[index]!;
    if (value < 0 || value >= tabledIds) widest = Math.max(widest, digitCount(Math.abs(value)) + 2);
  }
  const beforeLength = Buffer.byteLength(before);
  const out = Buffer.allocUnsafe(beforeLength + ids.length * widest + 8 + Buffer.byteLength(after));
  const words = new DataView(out.buffer, out.byteOffset, out.byteLength);
  let position = out.write(before, 0);
  for (let index = 0; index < ids.length; index++) {
    let value = ids[index]!;
    if (value >= 0 && value < tabledIds) {
      let length = tableLength[value]!;
      if (length === 0) {
        tableEntry(value);
        length = tableLength[value]!;
      }
      words.setUint32(position, tableLow[value]!, true);
      words.setUint32(position + 4, tableHigh[value]!, true);
      position += length;
      continue;
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
