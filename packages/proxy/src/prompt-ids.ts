import type { TokenBuffer } from './token-buffer.js';

/**
 * A prompt's token ids: the first `baseLength` ids of a token buffer (the session's history, not
 * copied) followed by `tail` (what the request adds). A long conversation's prompt repeats tens of
 * thousands of ids on every request; reading them from the buffer where they are needed (the
 * `/generate` body) saves a copy of the whole history per request. The view stays valid: a token
 * buffer only grows, so its first `baseLength` ids never change.
 */
export class PromptIds {
  readonly base: TokenBuffer | null;
  readonly baseLength: number;
  readonly tail: Int32Array;

  constructor(base: TokenBuffer | null, baseLength: number, tail: Int32Array) {
    this.base = base;
    this.baseLength = base === null ? 0 : baseLength;
    this.tail = tail;
  }

  /** A prompt that is `ids` alone. */
  static of(ids: Int32Array): PromptIds {
    return new PromptIds(null, 0, ids);
  }

  get length(): number {
    return this.baseLength + this.tail.length;
  }

  /** The ids as one array: `tail` itself without a base, else a copy. */
  toInt32Array(): Int32Array {
    if (this.base === null) return this.tail;
    const out = new Int32Array(this.length);
    this.base.copyIdsInto(out, 0, this.baseLength);
    out.set(this.tail, this.baseLength);
    return out;
  }
}
