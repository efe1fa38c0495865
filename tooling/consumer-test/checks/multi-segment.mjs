// @dressage/multi-segment from its tarball: expand a two-segment trajectory into slime samples.
import assert from 'node:assert/strict';
import { expandSegmentsToSamples } from '@dressage/multi-segment';
import { tokenCap } from '@dressage/multi-segment/internal';
import { createSample } from '@dressage/protocol';

const segment = (index, tokens, mask) => ({
  session_id: 'sess-1',
  instance_id: 'inst-1',
  segment_index: index,
  segment_count: 2,
  tokens,
  full_logprobs: mask.map((value) => (value ? -0.5 : 0)),
  full_loss_mask: mask,
  full_versions: mask.map((value) => (value ? '1' : '-1')),
  finish_reason: 'stop',
  messages: [{ role: 'assistant', content: `answer ${index}` }],
});
const template = createSample({ index: 7, group_index: 3, metadata: { instance_id: 'inst-1' } });
const samples = expandSegmentsToSamples(template, [
  segment(1, [1, 2, 3, 4, 5], [0, 0, 1, 1, 1]),
  segment(0, [1, 2, 9, 9], [0, 0, 1, 1]),
]);
assert.equal(samples.length, 2);
assert.deepEqual(
  samples.map((sample) => sample.rollout_id),
  [7, 7],
);
assert.equal(samples[0].reward, 0);
assert.equal(samples[1].reward, null);
assert.deepEqual(samples[1].loss_mask, [1, 1, 1]);
// The building blocks are a subpath of their own.
assert.equal(tokenCap({ maxTokensPerGpu: 4, contextParallelSize: 2 }), 8);
console.log(`expanded 2 segments into samples sharing rollout_id ${samples[0].rollout_id}`);
