import { describe, expect, it } from 'vitest';
import { DressageError } from './errors.js';
import type { PackedTrainBatch } from './train-batch-packing.js';
import { checkTrainBatchValues } from './train-batch-values.js';

// Three samples with 2, 3 and 2 response tokens; rollout ids 10, 11, 12.
function batch(): PackedTrainBatch {
  return {
    sample_count: 3,
    tokens: Int32Array.of(1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
    total_lengths: Int32Array.of(3, 4, 3),
    response_lengths: Int32Array.of(2, 3, 2),
    loss_masks: Uint8Array.of(1, 1, 1, 0, 1, 1, 1),
    rollout_log_probs: Float32Array.of(-0.1, -0.2, -0.3, 0, -0.5, -0.6, -0.7),
    teacher_log_probs: null,
    rollout_ids: Int32Array.of(10, 11, 12),
    rewards: Float32Array.of(1, -0.5, 0.25),
    raw_rewards: Float32Array.of(1, 0, 0.5),
    rollout_mask_sums: Float64Array.of(2, 2, 2),
    truncated: new Uint8Array(3),
    sample_indices: Int32Array.of(0, 1, 2),
  };
}

function rejection(value: PackedTrainBatch): DressageError {
  try {
    checkTrainBatchValues(value);
  } catch (error) {
    if (DressageError.isInstance(error)) return error;
    throw error;
  }
  throw new Error('expected a rejection');
}

describe('checkTrainBatchValues', () => {
  it('accepts a finite batch', () => {
    expect(() => checkTrainBatchValues(batch())).not.toThrow();
  });

  it.each([
    ['rewards', Number.NaN],
    ['rewards', Number.POSITIVE_INFINITY],
    ['raw_rewards', Number.NEGATIVE_INFINITY],
    ['rollout_mask_sums', Number.NaN],
  ] as const)('names the sample of a non-finite %s (%s)', (field, value) => {
    const bad = batch();
    bad[field][1] = value;
    const error = rejection(bad);
    expect(error.code).toBe('invalid_argument');
    expect(error.message).toContain(`sample 1 (rollout_id 11) has ${field} = ${value}`);
    expect(error.details).toMatchObject({ sample: 1, rollout_id: 11, field });
  });

  it('names the sample and response token of a NaN logprob, masked out or not', () => {
    const bad = batch();
    bad.rollout_log_probs![3] = Number.NaN; // sample 1, its second response token (loss mask 0)
    const error = rejection(bad);
    expect(error.message).toContain('sample 1 (rollout_id 11) has rollout_log_probs[1]');
    expect(error.details).toMatchObject({ sample: 1, field: 'rollout_log_probs', response_token: 1 });
    const teacher = batch();
    teacher.teacher_log_probs = Float32Array.of(0, 0, 0, 0, 0, 0, Number.NEGATIVE_INFINITY);
    expect(rejection(teacher).details).toMatchObject({
      sample: 2,
      field: 'teacher_log_probs',
      response_token: 1,
    });
  });
});
