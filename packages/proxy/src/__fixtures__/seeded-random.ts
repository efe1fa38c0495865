/**
 * A deterministic source of numbers in [0, 1) (xorshift32): every seed gives one sequence, so a
 * generated conversation or workload repeats run after run.
 */
export function random(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
}
