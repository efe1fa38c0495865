// `/generate` bodies kept for the next request of the same history. SGLang's `/generate` is
// stateless, so every request of a conversation carries all of its ids again; their digits were
// written for the previous request already. A body whose ids start with a token buffer's is kept with
// that buffer, and the buffer's next body continues it: the ids the buffer gained since are written
// after the kept ones and the rest of the body after them, in place. The work per request is then
// proportional to what is new, not to the history. Kept bodies have a budget in bytes. When it is
// full, a new body takes the place of bodies left unused for a while (the least recently used
// first), else it is not kept: with more histories than the budget holds, taking turns, evicting
// the least recently used would evict every body before its next use, while keeping the first ones
// serves those.

import { comma, IdsWriter, idsJson } from './ids-json.js';
import type { PromptIds } from './prompt-ids.js';
import type { TokenBuffer } from './token-buffer.js';

/**
 * Bytes of kept bodies an {@link IdsBodyCache} holds by default: 64 MiB, the bodies of about 170
 * histories of 68K tokens (64 such sessions' bodies take about 36 MiB).
 */
export const defaultIdsBodyCacheBytes = 64 * 1024 * 1024;

/** How long a kept body stays unused before a new one may take its place, by default: one minute. */
export const defaultIdsBodyIdleMs = 60_000;

/** Options of {@link IdsBodyCache}. */
export interface IdsBodyCacheOptions {
  /** Bytes of kept bodies at most. Default {@link defaultIdsBodyCacheBytes}; 0 keeps none. */
  budgetBytes?: number;
  /** Milliseconds a body stays unused before a new one may evict it. Default {@link defaultIdsBodyIdleMs}. */
  idleMs?: number;
}

/** A body of ids to send, and what to do once the engine is done with it. */
export interface IdsBody {
  readonly bytes: Buffer;
  /**
   * Called once when the request ended: `reusable` when the engine answered it whole with a 2xx (it
   * read the whole body, and nothing reads these bytes any longer); else the body is not kept.
   */
  release(reusable: boolean): void;
}

// The digits of a token buffer's first `idCount` ids, after `before`, up to `digitsEnd` (just past
// the last one's comma) in `bytes`; null bytes once evicted.
interface KeptBody {
  before: string;
  bytes: Buffer | null;
  idCount: number;
  digitsEnd: number;
  /** A request is sending `bytes`: another one of the same buffer writes a body of its own. */
  inUse: boolean;
  /** `performance.now()` of its last use. */
  usedAt: number;
}

const notKept = (bytes: Buffer): IdsBody => ({ bytes, release() {} });

/**
 * Writes `/generate` bodies like {@link idsJson}, keeping the body of each history (token buffer) for
 * its next request within a byte budget.
 *
 * @example
 * ```ts
 * const bodies = new IdsBodyCache();
 * const body = bodies.body('{"input_ids":[', prompt, '],"rid":"r1"}');
 * try { await send(body.bytes); body.release(true); } catch (error) { body.release(false); throw error; }
 * ```
 */
export class IdsBodyCache {
  readonly #budgetBytes: number;
  readonly #idleMs: number;
  #keptBytes = 0;
  readonly #kept = new WeakMap<TokenBuffer, KeptBody>();
  // Least recently used first (a Set keeps insertion order; a use moves the body to the end).
  readonly #recent = new Set<KeptBody>();

  constructor(options: IdsBodyCacheOptions = {}) {
    this.#budgetBytes = options.budgetBytes ?? defaultIdsBodyCacheBytes;
    this.#idleMs = options.idleMs ?? defaultIdsBodyIdleMs;
  }

  /** Bytes of the bodies kept now. */
  get keptBytes(): number {
    return this.#keptBytes;
  }

  /** The bytes of `before`, the ids as comma-separated decimals, then `after` (see {@link idsJson}). */
  body(before: string, ids: Int32Array | PromptIds, after: string): IdsBody {
    if (ids instanceof Int32Array || ids.base === null || this.#budgetBytes <= 0)
      return notKept(idsJson(before, ids, after));
    const base = ids.base;
    let kept = this.#kept.get(base);
    if (kept?.inUse) return notKept(idsJson(before, ids, after));
    const afterLength = Buffer.byteLength(after);
    let writer: IdsWriter;
    let from: number;
    if (
      kept !== undefined &&
      kept.bytes !== null &&
      kept.before === before &&
      kept.idCount <= ids.baseLength
    ) {
      writer = new IdsWriter(kept.bytes, kept.digitsEnd, afterLength);
      // The last kept id's comma gave way to the previous body's `after`.
      if (kept.idCount > 0) kept.bytes[kept.digitsEnd - 1] = comma;
      from = kept.idCount;
    } else {
      if (kept !== undefined) this.#evict(kept);
      writer = IdsWriter.starting(before, ids.length, afterLength);
      from = 0;
    }
    writer.reserve(ids.length - from);
    writer.putPlanes(base, from, ids.baseLength, ids.tail.length);
    const digitsEnd = writer.position;
    writer.putArray(ids.tail, 0);
    const bytes = writer.finish(after, ids.length);
    const out = writer.out;
    const now = performance.now();
    const growth = out.length - (kept?.bytes?.length ?? 0);
    if (out.length > this.#budgetBytes || !this.#makeRoom(growth, now, kept)) {
      if (kept !== undefined) this.#evict(kept);
      return notKept(bytes);
    }
    // An evicted body of this buffer (bytes null) is taken up again: every field is set below.
    if (kept === undefined) {
      kept = { before, bytes: null, idCount: 0, digitsEnd: 0, inUse: false, usedAt: now };
      this.#kept.set(base, kept);
    }
    this.#keptBytes += growth;
    kept.bytes = out;
    kept.before = before;
    kept.idCount = ids.baseLength;
    kept.digitsEnd = digitsEnd;
    kept.inUse = true;
    kept.usedAt = now;
    this.#recent.delete(kept);
    this.#recent.add(kept);
    const body = kept;
    let released = false;
    return {
      bytes,
      release: (reusable: boolean) => {
        if (released) return;
        released = true;
        body.inUse = false;
        if (!reusable) this.#evict(body);
      },
    };
  }

  // True when `bytes` more fit the budget, after evicting bodies unused for `idleMs` (the least
  // recently used first; never `keep`, the body growing).
  #makeRoom(bytes: number, now: number, keep: KeptBody | undefined): boolean {
    if (this.#keptBytes + bytes <= this.#budgetBytes) return true;
    for (const kept of this.#recent) {
      if (now - kept.usedAt < this.#idleMs) break;
      if (kept === keep || kept.inUse) continue;
      this.#evict(kept);
      if (this.#keptBytes + bytes <= this.#budgetBytes) return true;
    }
    return false;
  }

  #evict(kept: KeptBody): void {
    if (kept.bytes !== null) this.#keptBytes -= kept.bytes.length;
    kept.bytes = null;
    this.#recent.delete(kept);
  }
}
