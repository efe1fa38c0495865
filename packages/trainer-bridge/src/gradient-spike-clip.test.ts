import { DressageError } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import {
  checkGradientSpikeFactor,
  GRADIENT_SPIKE_MIN_HISTORY,
  GRADIENT_SPIKE_WINDOW,
  GradientSpikeClip,
} from './gradient-spike-clip.js';

describe('GradientSpikeClip', () => {
  it('sets no limit until five norms are recorded, then factor × their median', () => {
    const clip = new GradientSpikeClip();
    for (const norm of [0.04, 0.02, 0.05, 0.03]) {
      clip.record(norm);
      expect(clip.limit(3)).toBeNull();
    }
    clip.record(0.01);
    expect(GRADIENT_SPIKE_MIN_HISTORY).toBe(5);
    // Median of 0.01..0.05 is 0.03.
    expect(clip.limit(3)).toBeCloseTo(0.09, 12);
    clip.record(0.06);
    // Six norms: the mean of the middle two (0.03, 0.04).
    expect(clip.limit(2)).toBeCloseTo(0.07, 12);
  });

  it('skips zero and non-finite norms (steps where every group scored the same)', () => {
    const clip = new GradientSpikeClip();
    for (const norm of [0.1, 0, Number.NaN, Number.POSITIVE_INFINITY, 0.1, 0.1, 0, 0.1]) clip.record(norm);
    expect(clip.norms).toEqual([0.1, 0.1, 0.1, 0.1]);
    expect(clip.limit(3)).toBeNull();
  });

  it('keeps the last twenty norms, so the limit follows a lasting change of scale', () => {
    const clip = new GradientSpikeClip();
    for (let step = 0; step < GRADIENT_SPIKE_WINDOW; step++) clip.record(0.01);
    expect(clip.limit(3)).toBeCloseTo(0.03, 12);
    for (let step = 0; step < 11; step++) clip.record(1);
    expect(clip.norms).toHaveLength(GRADIENT_SPIKE_WINDOW);
    expect(clip.limit(3)).toBeCloseTo(3, 12);
  });

  it('restores a checkpoint history, keeping its last twenty positive norms', () => {
    const stored = Array.from({ length: 25 }, (_, index) => index + 1);
    const clip = new GradientSpikeClip([...stored, 0]);
    expect(clip.norms).toEqual(stored.slice(-GRADIENT_SPIKE_WINDOW));
  });

  it('refuses a factor of 1 or less, naming the recipe key', () => {
    for (const factor of [1, 0.5, Number.NaN]) {
      const error = (() => {
        try {
          checkGradientSpikeFactor(factor);
        } catch (caught) {
          return caught;
        }
        return null;
      })();
      expect(error).toBeInstanceOf(DressageError);
      expect((error as DressageError).code).toBe('invalid_argument');
      expect((error as DressageError).message).toContain('loss.clip_grad_spike');
    }
    expect(() => new GradientSpikeClip().limit(1)).toThrow(/clip_grad_spike/);
  });
});
