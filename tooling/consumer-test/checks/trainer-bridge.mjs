// @dressage/trainer-bridge from its tarball: GRPO post-processing and prompt-equal conversion of a
// two-segment trajectory plus a one-segment one into a packed TrainBatch, without loading
// TensorFlow.js; then the policy loss from the `./tfjs` entry on the same batch.
import assert from 'node:assert/strict';
import { createSample } from '@dressage/protocol';
import { convertSamplesToPackedTrainBatch, rewardPostProcess } from '@dressage/trainer-bridge';
import { createSyntheticTrainBatch } from '@dressage/trainer-bridge/internal';

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
// tfjs-core creates its engine as globalThis._tfengine when it loads: the main entry must not.
assert.equal(globalThis._tfengine, undefined, 'the main entry loaded TensorFlow.js');
const { policyLossReference } = await import('@dressage/trainer-bridge');
const { policyLoss, selectBackend } = await import('@dressage/trainer-bridge/tfjs');
const tf = await import('@tensorflow/tfjs');
await selectBackend({ preference: 'cpu', log: () => undefined });
const responseTokens = packed.loss_masks.length;
const logProbs = new Float32Array(responseTokens).map((_, index) => -0.1 * (index + 1));
const options = { globalBatchSize: 2 };
const { loss } = policyLoss({ logProbs: tf.tensor1d(logProbs) }, packed, options);
const reference = policyLossReference({ logProbs }, packed, options);
assert.ok(Math.abs(loss.dataSync()[0] - reference.loss) < 1e-5, 'tfjs loss matches the reference');
// The building blocks are a subpath of their own.
assert.equal(
  createSyntheticTrainBatch({ samples: 2, tokensPerSample: 8, responseTokens: 4 }).sample_count,
  2,
);
console.log(
  `converted ${packed.sample_count} samples; prompt-equal denominators ${Array.from(packed.rollout_mask_sums).join(', ')}`,
);
