import type { SeededRandom } from './random.js';

/** How the next token is drawn from a distribution. */
export interface SamplingSettings {
  /** 0 (or below 1e-5) means greedy. */
  temperature: number;
  /** Nucleus mass in (0, 1]; 1 disables. */
  topP: number;
  /** Keep the k most likely tokens; -1 disables. */
  topK: number;
}

/** Temperatures below this sample greedily (and report logprobs at temperature 1), as SGLang does. */
export const greedyTemperature = 1e-5;

/** True when `settings` mean greedy decoding. */
export function isGreedy(settings: SamplingSettings): boolean {
  return settings.temperature < greedyTemperature || settings.topK === 1;
}

/** The temperature that divides logits before the reported logprobs are computed. */
export function logprobTemperature(settings: SamplingSettings): number {
  return settings.temperature < greedyTemperature ? 1 : settings.temperature;
}

function argmax(logprobs: ArrayLike<number>, start: number, count: number): number {
  let best = 0;
  let bestValue = Number.NEGATIVE_INFINITY;
  for (let index = 0; index < count; index++) {
    const value = logprobs[start + index]!;
    if (value > bestValue) {
      bestValue = value;
      best = index;
    }
  }
  return best;
}

/**
 * Draws one class from a row of (temperature-scaled) log-probabilities, applying top-k then top-p.
 * Deterministic for a given random state. Ties break toward the lower class.
 *
 * @param logprobs rows of log-probabilities; the row is `[start, start + count)`.
 */
export function sampleClass(
  logprobs: ArrayLike<number>,
  start: number,
  count: number,
  settings: SamplingSettings,
  random: SeededRandom,
): number {
  if (isGreedy(settings)) return argmax(logprobs, start, count);
  const filtered = (settings.topK > 0 && settings.topK < count) || settings.topP < 1;
  const uniform = random.nextFloat();
  if (!filtered) {
    // Mass below the target in float64; the last class absorbs any rounding remainder.
    let cumulative = 0;
    for (let index = 0; index < count; index++) {
      cumulative += Math.exp(logprobs[start + index]!);
      if (uniform < cumulative) return index;
    }
    return count - 1;
  }
  const order = Array.from({ length: count }, (_, index) => index);
  order.sort((left, right) => logprobs[start + right]! - logprobs[start + left]! || left - right);
  let kept = settings.topK > 0 ? Math.min(settings.topK, count) : count;
  if (settings.topP < 1) {
    let cumulative = 0;
    for (let rank = 0; rank < kept; rank++) {
      cumulative += Math.exp(logprobs[start + order[rank]!]!);
      // Keep the token that crosses the threshold, drop the rest.
      if (cumulative >= settings.topP) {
        kept = rank + 1;
        break;
      }
    }
  }
  let total = 0;
  for (let rank = 0; rank < kept; rank++) total += Math.exp(logprobs[start + order[rank]!]!);
  const target = uniform * total;
  let cumulative = 0;
  for (let rank = 0; rank < kept; rank++) {
    cumulative += Math.exp(logprobs[start + order[rank]!]!);
    if (target < cumulative) return order[rank]!;
  }
  return order[kept - 1]!;
}
