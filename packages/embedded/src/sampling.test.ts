import { describe, expect, it } from 'vitest';
import { SeededRandom } from './random.js';
import { sampleClass } from './sampling.js';

const logprobs = Float32Array.from([0.05, 0.5, 0.3, 0.15].map(Math.log));

function draw(
  settings: { temperature: number; topP: number; topK: number },
  seed: number,
  count: number,
): number[] {
  const random = new SeededRandom(seed);
  return Array.from({ length: count }, () => sampleClass(logprobs, 0, 4, settings, random));
}

describe('sampleClass', () => {
  it('is greedy at temperature 0 or top_k 1', () => {
    expect(draw({ temperature: 0, topP: 1, topK: -1 }, 1, 5)).toEqual([1, 1, 1, 1, 1]);
    expect(draw({ temperature: 1, topP: 1, topK: 1 }, 1, 5)).toEqual([1, 1, 1, 1, 1]);
  });

  it('repeats for a seed and follows the distribution', () => {
    const settings = { temperature: 1, topP: 1, topK: -1 };
    expect(draw(settings, 42, 50)).toEqual(draw(settings, 42, 50));
    expect(draw(settings, 42, 50)).not.toEqual(draw(settings, 43, 50));
    const counts = [0, 0, 0, 0];
    for (const value of draw(settings, 7, 4000)) counts[value]! += 1;
    expect(counts[1]! / 4000).toBeGreaterThan(0.45);
    expect(counts[1]! / 4000).toBeLessThan(0.55);
    expect(counts[0]).toBeGreaterThan(0);
  });

  it('keeps only the top-k classes and the top-p nucleus', () => {
    expect(new Set(draw({ temperature: 1, topP: 1, topK: 2 }, 3, 300))).toEqual(new Set([1, 2]));
    // 0.5 + 0.3 crosses 0.7: the nucleus is {1, 2}.
    expect(new Set(draw({ temperature: 1, topP: 0.7, topK: -1 }, 3, 300))).toEqual(new Set([1, 2]));
    expect(new Set(draw({ temperature: 1, topP: 0.4, topK: -1 }, 3, 50))).toEqual(new Set([1]));
  });
});
