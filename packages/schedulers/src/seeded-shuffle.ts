/**
 * A small deterministic 32-bit generator (multiply-xorshift over a Weyl sequence): the same seed
 * gives the same sequence on every platform, which is all a reproducible data order needs.
 */
export function createSeededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x9e3779b9) >>> 0;
    let mixed = state;
    mixed = Math.imul(mixed ^ (mixed >>> 16), 0x85ebca6b);
    mixed = Math.imul(mixed ^ (mixed >>> 13), 0xc2b2ae35);
    mixed ^= mixed >>> 16;
    return (mixed >>> 0) / 2 ** 32;
  };
}

/**
 * The order `0..size-1` shuffled by a Fisher–Yates pass seeded with `seed`. A typed array keeps a
 * permutation of millions of prompts at 4 bytes each.
 */
export function seededPermutation(size: number, seed: number): Uint32Array {
  const order = new Uint32Array(size);
  for (let i = 0; i < size; i++) order[i] = i;
  const random = createSeededRandom(seed);
  for (let i = size - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    const swap = order[i] as number;
    order[i] = order[j] as number;
    order[j] = swap;
  }
  return order;
}
