// @dressage/protocol from its tarball: validate a request, round-trip a batch through Train chunks,
// and route a request with the HTTP layer of its ./http subpath.
import assert from 'node:assert/strict';
import {
  chatCompletionRequestSchema,
  DressageError,
  packTrainBatch,
  safeParseWire,
  TrainChunk,
} from '@dressage/protocol';
import { HttpError, httpStatusOf, RouteTable, requestPath } from '@dressage/protocol/http';
import { trainBatchFromChunks, trainBatchToChunks } from '@dressage/protocol/internal';

const bad = safeParseWire(chatCompletionRequestSchema, { messages: [{ role: 'robot' }] }, 'request');
assert.equal(bad.success, false);
assert.ok(DressageError.isInstance(bad.error));
assert.match(bad.error.message, /messages\[0\]\.role/);

const packed = packTrainBatch({
  tokens: [
    [1, 2, 3, 4],
    [5, 6, 7],
  ],
  response_lengths: [2, 1],
  loss_masks: [[1, 1], [0]],
  rollout_log_probs: [[-0.5, -0.25], [0]],
  rewards: [1, -1],
  raw_reward: [1, 0],
  truncated: [0, 0],
  sample_indices: [0, 1],
  rollout_ids: [0, 1],
  rollout_mask_sums: [2, 1],
});
const chunks = trainBatchToChunks(packed, {
  batch_id: 'b',
  rollout_id: 1,
  global_batch_size: 2,
  expected_weight_version: '',
});
const wire = chunks.map((chunk) => TrainChunk.decode(TrainChunk.encode(chunk).finish()));
const { batch } = trainBatchFromChunks(wire);
assert.deepEqual(Array.from(batch.tokens), [1, 2, 3, 4, 5, 6, 7]);
assert.deepEqual(Array.from(batch.rollout_log_probs), [-0.5, -0.25, 0]);
const routes = new RouteTable().add('POST', '/s/{session}/v1/chat/completions', 'chat');
const found = routes.lookup('POST', requestPath('/s/rollout%3A7/v1/chat/completions/'));
assert.deepEqual(found, { kind: 'found', handler: 'chat', parameters: { session: 'rollout:7' } });
const tooLarge = new HttpError({ status: 413, message: 'too large' });
assert.ok(DressageError.isInstance(tooLarge));
assert.equal(httpStatusOf(tooLarge), 413);
console.log(
  `validated a request, round-tripped ${batch.sample_count} samples through ${chunks.length} Train chunks, routed a session URL`,
);
