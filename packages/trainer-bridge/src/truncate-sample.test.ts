import { createSample, SampleStatus } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { convertSamplesToPackedTrainBatch, convertSamplesToTrainData } from './convert.js';
import { truncateSample } from './truncate-sample.js';

// Three prompt tokens and five response tokens, every per-token field distinct by position.
function longSample() {
  return createSample({
    index: 0,
    group_index: 0,
    rollout_id: 0,
    tokens: [10, 11, 12, 13, 14, 15, 16, 17],
    response_length: 5,
    loss_mask: [1, 0, 1, 1, 1],
    rollout_log_probs: [-0.1, -0.2, -0.3, -0.4, -0.5],
    teacher_log_probs: [-1.1, -1.2, -1.3, -1.4, -1.5],
    reward: 1,
    status: SampleStatus.COMPLETED,
    metadata: {
      instance_id: 'p',
      parent_traj_id: 't',
      full_versions: ['-1', '-1', '-1', '3', '3', '4', '4', '4'],
    },
    rollout_routed_experts: {
      rows: 7,
      numLayers: 1,
      topk: 2,
      ids: Int32Array.from({ length: 14 }, (_, i) => i),
    },
  });
}

describe('max sequence length', () => {
  it('cuts tokens, response, loss mask, logprobs, versions and routed experts to the same length', () => {
    const original = longSample();
    const cut = truncateSample(original, 6);
    expect(cut.tokens).toEqual([10, 11, 12, 13, 14, 15]);
    expect(cut.response_length).toBe(3);
    expect(cut.loss_mask).toEqual([1, 0, 1]);
    expect(cut.rollout_log_probs).toEqual([-0.1, -0.2, -0.3]);
    expect(cut.teacher_log_probs).toEqual([-1.1, -1.2, -1.3]);
    expect(cut.metadata.full_versions).toEqual(['-1', '-1', '-1', '3', '3', '4']);
    expect(cut.metadata.version_spans).toEqual([
      { start: 0, end: 3, version: '-1' },
      { start: 3, end: 5, version: '3' },
      { start: 5, end: 6, version: '4' },
    ]);
    expect(cut.rollout_routed_experts).toMatchObject({
      rows: 5,
      ids: Int32Array.from({ length: 10 }, (_, i) => i),
    });
    expect(cut.status).toBe(SampleStatus.TRUNCATED);
    expect(cut.metadata.truncated).toBe(true);
    // The input is untouched, and a sample that fits comes back as is.
    expect(original.tokens).toHaveLength(8);
    expect(original.metadata.full_versions).toHaveLength(8);
    expect(truncateSample(original, 8)).toBe(original);
  });

  it('leaves no response when the prompt alone reaches the limit', () => {
    const cut = truncateSample(longSample(), 2);
    expect(cut.tokens).toEqual([10, 11]);
    expect(cut.response_length).toBe(0);
    expect(cut.loss_mask).toEqual([]);
    expect(cut.rollout_log_probs).toEqual([]);
  });

  it('is an option of the conversion: the batch holds the cut samples, marked truncated', () => {
    const batch = convertSamplesToTrainData([longSample()], { maxSequenceLength: 6, globalBatchSize: 1 });
    expect(batch.tokens).toEqual([[10, 11, 12, 13, 14, 15]]);
    expect(batch.response_lengths).toEqual([3]);
    expect(batch.loss_masks).toEqual([[1, 0, 1]]);
    expect(batch.rollout_log_probs).toEqual([[-0.1, -0.2, -0.3]]);
    expect(batch.teacher_log_probs).toEqual([[-1.1, -1.2, -1.3]]);
    expect(batch.truncated).toEqual([1]);
    // The denominators count the trainable tokens that remain.
    expect(batch.rollout_mask_sums).toEqual([2]);
    const packed = convertSamplesToPackedTrainBatch([longSample()], {
      maxSequenceLength: 6,
      globalBatchSize: 1,
    });
    expect(Array.from(packed.total_lengths)).toEqual([6]);
    const whole = convertSamplesToTrainData([longSample()], { globalBatchSize: 1 });
    expect(whole.tokens[0]).toHaveLength(8);
    expect(whole.truncated).toEqual([0]);
  });

  it('refuses a limit that is not a positive integer, naming it', () => {
    expect(() => convertSamplesToTrainData([longSample()], { maxSequenceLength: 0 })).toThrow(
      /maxSequenceLength/,
    );
  });
});
