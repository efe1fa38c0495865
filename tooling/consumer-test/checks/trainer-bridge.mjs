// @dressage/trainer-bridge from its tarball: GRPO post-processing and prompt-equal conversion of a
// two-segment trajectory plus a one-segment one into a packed TrainBatch.
import assert from 'node:assert/strict';
import { createSample } from '@dressage/protocol';
import { convertSamplesToPackedTrainBatch, rewardPostProcess } from '@dressage/trainer-bridge';

const sample = (trajectory, segmentIndex, mask, reward) =>
  createSample({
    index: segmentIndex,
    group_index: 0,
    rollout_id: trajectory === 't1' ? 0 : 1,
    tokens: [1, ...mask.map(() => 2)],
    response_length: mask.length,
    loss_mask: mask,
    reward,
    metadata: { parent_traj_id: trajectory, instance_id: 'p1', segment_index: segmentIndex },
  });
const samples = [sample('t1', 0, [1, 1, 1], 0), sample('t1', 1, [1, 0, 1], 2), sample('t2', 0, [1, 1], 4)];

assert.deepEqual(rewardPostProcess(samples).rewards, [-1, -1, 1]);
const packed = convertSamplesToPackedTrainBatch(samples, { globalBatchSize: 2 });
assert.deepEqual(Array.from(packed.rollout_mask_sums), [3.5, 3.5, 3.5]);
assert.equal(packed.tokens.length, 11);
console.log(
  `converted ${packed.sample_count} samples; prompt-equal denominators ${Array.from(packed.rollout_mask_sums).join(', ')}`,
);
