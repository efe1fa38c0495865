// @dressage/multi-segment from its tarball: expand a two-segment trajectory into slime samples.
import assert from 'node:assert/strict';
import { expandSegmentsToSamples } from '@dressage/multi-segment';
import { tokenCap } from '@dressage/multi-segment/internal';
import { createSample, segmentShapeSchema } from '@dressage/protocol';

// A segment record as `/trajectory/read` writes it, read the way ProxyClient.readTrajectory reads it.
const segment = (index, tokens, mask) =>
  segmentShapeSchema.parse({
    uid: `uid-${index}`,
    session_id: 'sess-1',
    trajectory_id: 'sess-1',
    turn_id: null,
    instance_id: 'inst-1',
    segment_index: index,
    segment_count: 2,
    messages: [{ role: 'assistant', content: `answer ${index}` }],
    tools: null,
    tokens,
    full_logprobs: mask.map((value) => (value ? -0.5 : 0)),
    full_loss_mask: mask,
    aligned_response_length: mask.filter((value) => value === 1).length,
    finish_reason: 'stop',
    timestamp: 1,
    full_versions: mask.map((value) => (value ? '1' : '-1')),
    extra_info: {
      token_build_mode: 'snapshot',
      context_token_count: 2,
      output_token_count: tokens.length - 2,
      num_steps: 1,
      lineage_id: 'lineage-1',
      lineage_index: 0,
      segment_reason: 'initial',
      segment_reasons: ['initial'],
      finalization_complete: true,
      finalization_id: 'finalization-1',
      segment_view: 'timeline',
      alignment_method: 'snapshot_step',
      num_turns: 1,
      turn_ids: [`turn-${index}`],
      step_id: `step-${index}`,
      timestamp: '1',
      history_rewritten: false,
      trajectory_num_segments: 2,
      route_type: 'create',
      route_base_step_id: null,
    },
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
