// Token ids as JSON bytes, written straight from the typed arrays they are kept in. The engine's `/generate` body is
// mostly `input_ids`, and a long conversation has tens of thousands of them: each id's digits and
// comma come from a table of the ids seen so far (two 4-byte stores an id, instead of a division per
// two digits). A body may be kept for the next one of the same history, which then writes only the
// ids that are new (ids-body-cache.ts).

import type { PromptIds } from './prompt-ids.js';
import type { TokenBuffer } from './token-buffer.js';

/** The byte every written id ends with. */
export const comma = 0x2c;
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

/**
 * Writes ids as JSON into a buffer: room for tabled ids (at most six digits and a comma) with 8 bytes
 * of slack after the last one, since a tabled id writes 8 bytes and moves on by its length. Grows the
 * buffer when it runs out (an id outside the table, or {@link reserve}).
 */
export class IdsWriter {
  out: Buffer;
  words: DataView;
  position: number;
  readonly #afterLength: number;

  /** Writes after `position` of `out` (whose bytes before it are kept), with `after` bytes to come. */
  constructor(out: Buffer, position: number, afterLength: number) {
    this.#afterLength = afterLength;
    this.out = out;
    this.words = new DataView(out.buffer, out.byteOffset, out.byteLength);
    this.position = position;
  }

  /** A writer over a new buffer that starts with `before`, with room for `idCount` ids. */
  static starting(before: string, idCount: number, afterLength: number): IdsWriter {
    const out = Buffer.allocUnsafe(Buffer.byteLength(before) + idCount * 7 + 8 + afterLength);
    return new IdsWriter(out, out.write(before, 0), afterLength);
  }

  /**
   * Makes room for `idCount` more ids as tabled ones (then the slack and the text after them),
   * growing by half again at least, so a buffer reused for a growing history is copied rarely.
   */
  reserve(idCount: number): void {
    const needed = this.position + idCount * 7 + 8 + this.#afterLength;
    if (needed > this.out.length) this.#grow(Math.max(needed, Math.ceil(this.out.length * 1.5)));
  }

  #grow(size: number): void {
    const larger = Buffer.allocUnsafe(size);
    this.out.copy(larger, 0, 0, this.position);
    this.out = larger;
    this.words = new DataView(larger.buffer, larger.byteOffset, larger.byteLength);
  }

  // An id outside the table (rare: none of a vocabulary's), with `remaining` ids after it: makes room
  // for itself (a minus, ten digits and a comma at most) and the rest as tabled ids.
  putRare(value: number, remaining: number): void {
    const needed = this.position + 12 + remaining * 7 + 8 + this.#afterLength;
    // With room for a few more like it, so a run of them does not copy at every one.
    if (needed > this.out.length) this.#grow(needed + 12 * 8);
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

  // Writes ids `[start, end)` of a token buffer's planes, with `remaining` ids to come after them.
  putPlanes(buffer: TokenBuffer, start: number, end: number, remaining: number): void {
    const { low, high } = buffer.planes();
    let words = this.words;
    let position = this.position;
    for (let index = start; index < end; index++) {
      const value = high === null ? low[index]! : low[index]! | (high[index]! << 16);
      const next = putTabled(words, position, value);
      if (next >= 0) {
        position = next;
        continue;
      }
      this.position = position;
      this.putRare(value, end - index - 1 + remaining);
      words = this.words;
      position = this.position;
    }
    this.position = position;
  }

  /**
   * Writes `after` (of the `afterLength` given), the last id's comma giving way to it when `ids`
   * were written, and returns the bytes written.
   */
  finish(after: string, ids: number): Buffer {
    let position = this.position;
    if (ids > 0) position--;
    position += this.out.write(after, position);
    return this.out.subarray(0, position);
  }
}

/**
 * Bytes of `before`, the ids as comma-separated decimals, then `after` (`before` and `after` are
 * UTF-8): the JSON of a body with the ids array in it, e.g. `{"input_ids":[` … `],"rid":"…"}`. A
 * prompt's ids are read where they are kept, its history from the session's token buffer.
 */
export function idsJson(before: string, ids: Int32Array | PromptIds, after: string): Buffer {
  const writer = IdsWriter.starting(before, ids.length, Buffer.byteLength(after));
  if (ids instanceof Int32Array) writer.putArray(ids, 0);
  else {
    if (ids.base !== null) writer.putPlanes(ids.base, 0, ids.baseLength, ids.tail.length);
    writer.putArray(ids.tail, 0);
  }
  return writer.finish(after, ids.length);
}
