import { describe, expect, it } from 'vitest';
import { warmStartSchema } from './recipe.js';
import { warmStartLearningRate } from './warm-start.js';

describe('warm-start learning rate', () => {
  it('stays at learning_rate by default', () => {
    const settings = warmStartSchema.parse({ steps: 10, learning_rate: 0.004 });
    expect(settings.learning_rate_schedule).toBe('constant');
    const rates = Array.from({ length: 10 }, (_, index) => warmStartLearningRate(settings, index));
    expect(new Set(rates)).toEqual(new Set([0.004]));
  });

  it('follows a cosine from learning_rate towards min_learning_rate, every rate above it', () => {
    const settings = warmStartSchema.parse({
      steps: 4,
      learning_rate: 0.01,
      learning_rate_schedule: 'cosine',
      min_learning_rate: 0,
    });
    const rates = Array.from({ length: 4 }, (_, index) => warmStartLearningRate(settings, index));
    expect(rates[0]).toBeCloseTo(0.01, 12);
    // Halfway the cosine is at the middle of the range.
    expect(rates[2]).toBeCloseTo(0.005, 12);
    // The last step still trains: a floor of 0 is approached, never sent.
    expect(rates[3]).toBeCloseTo(0.005 * (1 + Math.cos((Math.PI * 3) / 4)), 12);
    expect(rates[3]).toBeGreaterThan(0);
    for (let index = 1; index < rates.length; index++)
      expect(rates[index]).toBeLessThan(rates[index - 1] as number);
  });

  it('refuses an unknown schedule, naming the field', () => {
    const parsed = warmStartSchema.safeParse({ learning_rate_schedule: 'linear' });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.path).toEqual(['learning_rate_schedule']);
  });
});
