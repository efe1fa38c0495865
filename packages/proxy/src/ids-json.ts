// Token ids as JSON bytes, written straight from the typed arrays they are kept in. The engine's `/generate` body is
// mostly `input_ids`, and a long conversation has tens of thousands of them: each id's digits and
// comma come from a table of the ids seen so far (two 4-byte stores an id, instead of a division per
// two digits), and nothing is kept between requests but that table (a session holds its ids once,
// in its token buffer).

import type { PromptIds } from './prompt-ids.js';
import type { TokenBuffer } from './token-buffer.js';

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

// Writes a tabled id's digits and comma at `position` (with 8 bytes of room there) and returns the
// position after the comma; -1 for an id outside the table. The eighth byte (the length) lands where
// the next id or the text after the ids overwrites it.
function putTabled(words: DataView, position: number, value: number): number {
  if (value < 0 || value >= tabledIds) return -1;
  let high = table[2 * value + 1]!;
  if (high === 0) {
    tableEntry(value);
    high = table[2 * value + 1]!;
  }
  words.setUint32(position, table[2 * value]!, true);
  words.setUint32(position + 4, high, true);
  return position + (high >>> 24);
}

// The output of one `idsJson` call: room for tabled ids (at most six digits and a comma) with 8
// bytes of slack after the last one, since a tabled id writes 8 bytes and moves on by its length.
class IdsWriter {
  out: Buffer;
  words: DataView;
  position: number;
  readonly #afterLength: number;

  constructor(before: string, idCount: number, afterLength: number) {
    this.#afterLength = afterLength;
    this.out = Buffer.allocUnsafe(Buffer.byteLength(before) + idCount * 7 + 8 + afterLength);
    this.words = new DataView(this.out.buffer, this.out.byteOffset, this.out.byteLength);
    this.position = this.out.write(before, 0);
  }

  // An id outside the table (rare: none of a vocabulary's), with `remaining` ids after it: makes room
  // for itself (a minus, ten digits and a comma at most) and the rest as tabled ids.
  putRare(value: number, remaining: number): void {
    const needed = this.position + 12 + remaining * 7 + 8 + this.#afterLength;
    if (needed > this.out.length) {
      // With room for a few more like it, so a run of them does not copy at every one.
      const larger = Buffer.allocUnsafe(needed + 12 * 8);
      this.out.copy(larger, 0, 0, this.position);
      this.out = larger;
      this.words = new DataView(larger.buffer, larger.byteOffset, larger.byteLength);
    }
    let position = this.position;
    if (value < 0) {
      this.out[position++] = minus;
      value = -value;
    }
    const end = position + digitCount(value);
    writeDigits(this.out, value, end);
    this.out[end] = comma;
    this.position = end + 1;
  }

  // Writes `ids`, with `remaining` ids to come after them.
  putArray(ids: Int32Array, remaining: number): void {
    let words = this.words;
    let position = this.position;
    for (let index = 0; index < ids.length; index++) {
      const value = ids[index]!;
      const next = putTabled(words, position, value);
      if (next >= 0) {
        position = next;
        continue;
      }
      this.position = position;
      this.putRare(value, ids.length - index - 1 + remaining);
      words = this.words;
      position = this.position;
    }
    this.position = position;
  }

  // Writes the first `length` ids of a token buffer's planes, with `remaining` ids to come after them.
  putPlanes(buffer: TokenBuffer, length: number, remaining: number): void {
    const { low, high } = buffer.planes();
    let words = this.words;
    let position = this.position;
    for (let index = 0; index < length; index++) {
      const value = high === null ? low[index]! : low[index]! | (high[index]! << 16);
      const next = putTabled(words, position, value);
      if (next >= 0) {
        position = next;
        continue;
      }
      this.position = position;
      this.putRare(value, length - index - 1 + remaining);
      words = this.words;
      position = this.position;
    }
    this.position = position;
  }
}

/**
 * Bytes of `before`, the ids as comma-separated decimals, then `after` (`before` and `after` are
 * UTF-8): the JSON of a body with the ids array in it, e.g. `{"input_ids":[` … `],"rid":"…"}`. A
 * prompt's ids are read where they are kept, its history from the session's token buffer.
 */
export function idsJson(before: string, ids: Int32Array | PromptIds, after: string): Buffer {
  const afterLength = Buffer.byteLength(after);
  const writer = new IdsWriter(before, ids.length, afterLength);
  if (ids instanceof Int32Array) writer.putArray(ids, 0);
  else {
    if (ids.base !== null) writer.putPlanes(ids.base, ids.baseLength, ids.tail.length);
    writer.putArray(ids.tail, 0);
  }
  let position = writer.position;
  // The last id's comma gives way to `after`.
  if (ids.length > 0) position--;
  position += writer.out.write(after, position);
  return writer.out.subarray(0, position);
}
