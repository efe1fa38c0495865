import { CONTEXT_TOKEN_VERSION } from '@dressage/protocol';
import type { RoutedExpertsDtype } from './config.js';

/** Expert ids in the configured element type. */
export type RoutingArray = Int32Array | Uint16Array | Uint8Array;

/** Routed-expert rows of a buffer: row `r` is the routing of token position `r`. */
export interface RoutingRows {
  dtype: RoutedExpertsDtype;
  /** Ids per row (layers × top-k). */
  width: number;
  /** Rows filled, from 0. */
  rows: number;
  data: RoutingArray;
}

function routingArray(dtype: RoutedExpertsDtype, length: number): RoutingArray {
  if (dtype === 'uint8') return new Uint8Array(length);
  if (dtype === 'uint16') return new Uint16Array(length);
  return new Int32Array(length);
}

/** A run of token versions: tokens before `end` (and after the previous run) carry `version`. */
export interface VersionRun {
  end: number;
  version: string;
}

/** The high 16 bits of each id: none while every id fits 16 bits, then bytes, then 16-bit words. */
type HighPlane = Uint8Array | Uint16Array | null;

/**
 * Growable token storage of one lineage segment (or one snapshot step): ids in typed arrays,
 * logprobs of the response tokens only (float32, in order), response ranges and versions as runs. No
 * per-token objects.
 *
 * Ids are kept in two planes, the low 16 bits and the rest, the second only as wide as the ids need:
 * a vocabulary of up to 65,536 ids takes 2 bytes a token, one of up to 16.7M (Qwen3's 151,669) 3,
 * instead of an Int32Array's 4. Token ids are most of a long agent session's memory.
 */
export class TokenBuffer {
  length = 0;
  /** Flat `[start, end, start, end, …]` of model-output ranges (loss mask 1). */
  readonly responseRanges: number[] = [];
  readonly versionRuns: VersionRun[] = [];
  /** R3 rows of `[0, length - 1)` as far as the engine reported them; null without R3 data. */
  routing: RoutingRows | null = null;
  /** True once an engine payload did not fit (odd size, width or dtype change): no R3 rows at all. */
  routingInvalid = false;

  #low: Uint16Array;
  #high: HighPlane = null;

  // Logprobs of the response tokens, in the order of `responseRanges`. Context tokens (most of an
  // agent's tokens: prompts and tool outputs) have logprob 0 and take no room here.
  #responseLogprobs: Float32Array;
  #responseCount = 0;

  constructor(capacity = 256) {
    this.#low = new Uint16Array(capacity);
    this.#responseLogprobs = new Float32Array(Math.min(capacity, 256));
  }

  /** Ids the buffer has room for without growing. */
  get capacity(): number {
    return this.#low.length;
  }

  /** Bytes of id storage (with spare room). */
  get idsByteLength(): number {
    return this.#low.byteLength + (this.#high?.byteLength ?? 0);
  }

  // Room for `needed` elements with at most an eighth (or 1,024) spare: doubling would leave up to
  // half of a long conversation's buffer empty, and copying ids once per eighth of growth is cheap.
  static #grown(current: number, needed: number): number {
    return Math.max(needed + (needed >>> 3), current + 1024);
  }

  #reserve(extra: number): void {
    const needed = this.length + extra;
    if (needed <= this.#low.length) return;
    const capacity = TokenBuffer.#grown(this.#low.length, needed);
    const low = new Uint16Array(capacity);
    low.set(this.#low.subarray(0, this.length));
    this.#low = low;
    if (this.#high !== null) {
      const high = this.#high instanceof Uint8Array ? new Uint8Array(capacity) : new Uint16Array(capacity);
      high.set(this.#high.subarray(0, this.length));
      this.#high = high;
    }
  }

  // A high plane that holds `bits` (the widest id's high half): 8 or 16 bits wide.
  #widenHigh(bits: number): Uint8Array | Uint16Array {
    const high = this.#high;
    if (bits <= 0xff) {
      if (high !== null) return high;
      this.#high = new Uint8Array(this.#low.length);
      return this.#high;
    }
    if (high instanceof Uint16Array) return high;
    const wide = new Uint16Array(this.#low.length);
    if (high !== null) wide.set(high.subarray(0, this.length));
    this.#high = wide;
    return wide;
  }

  // Writes `ids` at `start` (room reserved). Each id keeps its 32-bit pattern, as an Int32Array would.
  #write(ids: ArrayLike<number>, start: number): void {
    // The typed-array copy keeps each id's low 16 bits.
    this.#low.set(ids, start);
    let highBits = 0;
    for (let index = 0; index < ids.length; index++) highBits |= ids[index]! >>> 16;
    if (highBits === 0 && this.#high === null) return;
    const high = this.#widenHigh(highBits);
    for (let index = 0; index < ids.length; index++) high[start + index] = ids[index]! >>> 16;
  }

  /**
   * The id planes (the arrays themselves, valid until the buffer next grows): id `i` is
   * `low[i] | (high[i] << 16)`, or `low[i]` when `high` is null.
   */
  planes(): { low: Uint16Array; high: Uint8Array | Uint16Array | null } {
    return { low: this.#low, high: this.#high };
  }

  /** Copies the ids of `[start, end)` into `target` at `offset`. */
  copyIdsInto(target: Int32Array, start: number, end: number, offset = 0): void {
    const low = this.#low;
    const high = this.#high;
    if (high === null) {
      target.set(low.subarray(start, end), offset);
      return;
    }
    for (let index = start, out = offset; index < end; index++, out++)
      target[out] = low[index]! | (high[index]! << 16);
  }

  /** A copy of the ids in `[start, end)`. */
  slice(start: number, end: number): Int32Array {
    const out = new Int32Array(Math.max(0, end - start));
    this.copyIdsInto(out, start, start + out.length);
    return out;
  }

  /** The id at `index` (undefined outside `[0, length)`). */
  idAt(index: number): number | undefined {
    if (index < 0 || index >= this.length) return undefined;
    return this.#low[index]! | ((this.#high?.[index] ?? 0) << 16);
  }

  #reserveLogprobs(extra: number): void {
    const needed = this.#responseCount + extra;
    if (needed <= this.#responseLogprobs.length) return;
    const logprobs = new Float32Array(TokenBuffer.#grown(this.#responseLogprobs.length, needed));
    logprobs.set(this.#responseLogprobs.subarray(0, this.#responseCount));
    this.#responseLogprobs = logprobs;
  }

  #pushVersion(end: number, version: string): void {
    const last = this.versionRuns.at(-1);
    if (last && last.version === version) last.end = end;
    else this.versionRuns.push({ end, version });
  }

  /** Appends context ids (mask 0, logprob 0, version `"-1"`). */
  appendContext(ids: ArrayLike<number>): void {
    if (ids.length === 0) return;
    this.#reserve(ids.length);
    this.#write(ids, this.length);
    this.length += ids.length;
    this.#pushVersion(this.length, CONTEXT_TOKEN_VERSION);
  }

  /** Appends model output with its logprobs and per-token version runs (relative to the output). */
  appendResponse(ids: Int32Array, logprobs: Float32Array, runs: readonly VersionRun[]): void {
    if (ids.length === 0) return;
    const start = this.length;
    this.#reserve(ids.length);
    this.#write(ids, start);
    this.#reserveLogprobs(ids.length);
    this.#responseLogprobs.set(logprobs.subarray(0, ids.length), this.#responseCount);
    this.#responseCount += ids.length;
    this.length += ids.length;
    const lastRange = this.responseRanges.length;
    if (lastRange > 0 && this.responseRanges[lastRange - 1] === start)
      this.responseRanges[lastRange - 1] = this.length;
    else this.responseRanges.push(start, this.length);
    for (const run of runs) this.#pushVersion(start + run.end, run.version);
  }

  /**
   * Places one engine call's routed experts (little-endian int32, `rows × width`, covering token
   * positions `[start, sequenceLength - 1)`). Rows already filled keep their first value: each row
   * stays the routing of the call that first processed that position, so the rows of a step's output
   * are the ones the engine used while generating it.
   */
  addRouting(base64: string, start: number, sequenceLength: number, dtype: RoutedExpertsDtype): void {
    if (this.routingInvalid) return;
    const bytes = Buffer.from(base64, 'base64');
    const rows = sequenceLength - 1 - start;
    const width = rows > 0 ? bytes.length / 4 / rows : 0;
    const filled = this.routing?.rows ?? 0;
    if (rows <= 0) return;
    if (!Number.isInteger(width) || width === 0) {
      this.#dropRouting();
      return;
    }
    // A gap before the payload: rows so far stay (earlier records keep theirs), later ones are unknown.
    if (start > filled) return;
    if (this.routing !== null && (this.routing.width !== width || this.routing.dtype !== dtype)) {
      this.#dropRouting();
      return;
    }
    // Positions past the buffer (an output that was not recorded) have no row here.
    const stop = Math.min(start + rows, Math.max(0, this.length - 1));
    if (stop <= filled) return;
    const ids = new Int32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    let routing = this.routing;
    if (routing === null || routing.data.length < stop * width) {
      let capacity = Math.max(64, routing === null ? 0 : routing.data.length / width);
      while (capacity < stop) capacity *= 2;
      const data = routingArray(dtype, capacity * width);
      if (routing !== null) data.set(routing.data.subarray(0, filled * width));
      routing = { dtype, width, rows: filled, data };
      this.routing = routing;
    }
    // The typed array converts int32 to the narrower type (uint8 keeps ids below 256).
    routing.data.set(ids.subarray((filled - start) * width, (stop - start) * width), filled * width);
    routing.rows = stop;
  }

  #dropRouting(): void {
    this.routingInvalid = true;
    this.routing = null;
  }

  /** The logprobs of `[0, end)`: each response token's as recorded, 0 for context tokens. */
  logprobsUpTo(end: number): Float32Array {
    const out = new Float32Array(end);
    let offset = 0;
    for (let index = 0; index < this.responseRanges.length; index += 2) {
      const start = this.responseRanges[index]!;
      const stop = this.responseRanges[index + 1]!;
      if (start >= end) break;
      const count = Math.min(stop, end) - start;
      out.set(this.#responseLogprobs.subarray(offset, offset + count), start);
      offset += stop - start;
    }
    return out;
  }

  /** Bytes of logprob storage (response tokens only, with spare room). */
  get logprobsByteLength(): number {
    return this.#responseLogprobs.byteLength;
  }

  /** The version runs restricted to `[start, end)`, relative to `start`. */
  versionRunsIn(start: number, end: number): VersionRun[] {
    const out: VersionRun[] = [];
    let runStart = 0;
    for (const run of this.versionRuns) {
      const from = Math.max(runStart, start);
      const to = Math.min(run.end, end);
      if (to > from) out.push({ end: to - start, version: run.version });
      runStart = run.end;
      if (runStart >= end) break;
    }
    return out;
  }
}

/** Expands version runs to one string per token. */
export function expandVersionRuns(runs: readonly VersionRun[], length: number): string[] {
  const versions = new Array<string>(length);
  let start = 0;
  for (const run of runs) {
    versions.fill(run.version, start, Math.min(run.end, length));
    start = run.end;
  }
  if (start < length) versions.fill(CONTEXT_TOKEN_VERSION, start, length);
  return versions;
}
