import { describe, expect, it } from 'vitest';
import { resolveTrainingOptions, usesPromptEqualDenominators } from './training-options.js';

describe('resolveTrainingOptions', () => {
  it('applies the defaults', () => {
    expect(resolveTrainingOptions()).toEqual({
      advantageEstimator: 'grpo',
      rewardsNormalization: true,
      standardDeviationNormalization: true,
      rewardKey: null,
      globalBatchSize: null,
    });
  });
  it('rejects a global batch size that is not a positive integer', () => {
    expect(() => resolveTrainingOptions({ globalBatchSize: 0 })).toThrowError(/positive integer/);
    expect(() => resolveTrainingOptions({ globalBatchSize: 2.5 })).toThrowError(/positive integer/);
  });
  it('uses prompt-equal denominators for grpo and REINFORCE++-baseline only', () => {
    expect(usesPromptEqualDenominators('grpo')).toBe(true);
    expect(usesPromptEqualDenominators('reinforce_plus_plus_baseline')).toBe(true);
    expect(usesPromptEqualDenominators('gspo')).toBe(false);
    expect(usesPromptEqualDenominators('ppo')).toBe(false);
  });
});
