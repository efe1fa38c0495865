/**
 * A small seeded pseudo-random generator (32-bit state, SplitMix-style mixing). Deterministic across
 * platforms and backends, which `Math.random` and tfjs's own initializers are not guaranteed to be.
 */
export class SeededRandom {
  #state: number;

  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** A uniform integer in [0, 2^32). */
  nextUint32(): number {
    this.#state = (this.#state + 0x9e3779b9) >>> 0;
    let value = this.#state;
    value = Math.imul(value ^ (value >>> 16), 0x85ebca6b) >>> 0;
    value = Math.imul(value ^ (value >>> 13), 0xc2b2ae35) >>> 0;
    return (value ^ (value >>> 16)) >>> 0;
  }

  /** A uniform float in [0, 1) with 53 random bits. */
  nextFloat(): number {
    const high = this.nextUint32() >>> 5;
    const low = this.nextUint32() >>> 6;
    return (high * 67108864 + low) / 9007199254740992;
  }

  /** A standard normal sample (Box-Muller). */
  nextNormal(): number {
    let uniform = this.nextFloat();
    while (uniform <= Number.MIN_VALUE) uniform = this.nextFloat();
    return Math.sqrt(-2 * Math.log(uniform)) * Math.cos(2 * Math.PI * this.nextFloat());
  }
}

/** Mixes a string into a 32-bit seed (FNV-1a), to derive per-request seeds from names. */
export function hashSeed(base: number, text: string): number {
  let hash = (0x811c9dc5 ^ base) >>> 0;
  for (let index = 0; index < text.length; index++) {
    hash ^= text.charCodeAt(index);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}
