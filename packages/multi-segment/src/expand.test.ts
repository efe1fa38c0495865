import { segmentFromRecord, segmentSchema, segmentShapeSchema } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { failure } from './__fixtures__/failure.js';
import { segment, template } from './__fixtures__/segments.js';
import { expandSegmentsToSamples } from './expand.js';

describe('expandSegmentsToSamples', () => {
  it('orders segments, shares the rollout id and leaves only the anchor unrewarded', () => {
    const samples = expandSegmentsToSamples(template(), [
      segment(2, [0, 1]),
      segment(0, [0, 1, 1]),
      segment(1, [1]),
    ]);
    expect(samples.map((sample) => sample.metadata.segment_index)).toEqual([0, 1, 2]);
    expect(samples.map((sample) => sample.rollout_id)).toEqual([7, 7, 7]);
    expect(samples.map((sample) => sample.reward)).toEqual([0, 0, null]);
    expect(samples.map((sample) => sample.group_index)).toEqual([3, 3, 3]);
    for (const sample of samples) {
      expect(sample.metadata).toMatchObject({
        parent_traj_id: 'session-1',
        instance_id: 'instance-1',
        segment_count: 3,
        all_segment_uids: ['uid-0', 'uid-1', 'uid-2'],
      });
    }
    expect(samples.map((sample) => sample.response_length)).toEqual([2, 1, 1]);
  });

  it('keeps a preset anchor reward from the template', () => {
    const samples = expandSegmentsToSamples(template({ reward: 0.5 }), [segment(0, [1]), segment(1, [1])]);
    expect(samples.map((sample) => sample.reward)).toEqual([0, 0.5]);
  });

  it('uses explicit ids over the template and the template over the segments', () => {
    const explicit = expandSegmentsToSamples(template(), [segment(0, [1])], {
      sessionId: 's-9',
      instanceId: 'i-9',
    });
    expect(explicit[0]?.metadata).toMatchObject({
      parent_traj_id: 's-9',
      session_id: 's-9',
      instance_id: 'i-9',
    });
    const fromSegments = expandSegmentsToSamples(template({ session_id: null, metadata: {} }), [
      segment(0, [1], { session_id: 's-seg', instance_id: 'i-seg' }),
    ]);
    expect(fromSegments[0]?.metadata).toMatchObject({ parent_traj_id: 's-seg', instance_id: 'i-seg' });
  });

  it('passes the token cap and agent response through', () => {
    const [sample] = expandSegmentsToSamples(template(), [segment(0, [0, 1, 1, 1], { messages: [] })], {
      maxTokensPerGpu: 3,
      agentResponse: 'from agent',
    });
    expect(sample?.tokens).toHaveLength(3);
    expect(sample?.metadata.truncated).toBe(true);
    expect(sample?.response).toBe('from agent');
  });

  it('expands a segment as the client reads it, the same as one checked token by token', () => {
    const record = segmentToJsonRecord();
    // What ProxyClient.readTrajectory does: the shape check, token data into typed arrays.
    const typed = segmentShapeSchema.parse(record);
    expect(typed.tokens).toBeInstanceOf(Int32Array);
    const [sample] = expandSegmentsToSamples(template(), [typed]);
    expect(sample?.response).toBe('hello');
    expect(sample?.rollout_log_probs).toEqual([-0.5, -0.25]);
    expect(sample?.metadata.dressage_end_token_version).toBe('1');
    expect(Array.isArray(sample?.tokens)).toBe(true);
    // The same record checked token by token gives the same sample.
    const [checked] = expandSegmentsToSamples(template(), [segmentFromRecord(segmentSchema.parse(record))]);
    expect(checked).toEqual(sample);
  });

  it('gives an empty response when the trajectory ends on a tool call and no message has text', () => {
    const call = { id: 'c1', type: 'function', function: { name: 'weather', arguments: '{}' } };
    const endings: unknown[][] = [
      [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: null, tool_calls: [call] },
      ],
      [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', tool_calls: [call] },
      ],
      // Parts the shape check does not walk: only text parts count.
      [{ role: 'assistant', content: [null, { type: 'text', text: 'a' }, 7] }],
    ];
    const responses = endings.map((messages) => {
      const record = { ...segmentToJsonRecord(), messages };
      const [sample] = expandSegmentsToSamples(template(), [segmentShapeSchema.parse(record)]);
      return sample?.response;
    });
    expect(responses).toEqual(['', '', 'a']);
  });

  describe('errors name the session', () => {
    it('rejects an empty list', () => {
      expect(failure(() => expandSegmentsToSamples(template(), [])).message).toBe(
        'Session session-1: no segments to expand',
      );
    });
    it('rejects duplicated segment indexes', () => {
      const error = failure(() => expandSegmentsToSamples(template(), [segment(1, [1]), segment(1, [1])]));
      expect(error.message).toBe('Session session-1: segment_index 1 appears more than once');
    });
    it('rejects a template without index or group index', () => {
      expect(
        failure(() => expandSegmentsToSamples(template({ index: null }), [segment(0, [1])])).message,
      ).toContain('Session session-1: the template has no index');
      expect(
        failure(() => expandSegmentsToSamples(template({ group_index: null }), [segment(0, [1])])).message,
      ).toContain('Session session-1: the template has no group_index');
    });
  });
});

// One timeline segment record as `/trajectory/read` writes it in JSON.
function segmentToJsonRecord() {
  return {
    uid: 'u-1',
    session_id: 'session-1',
    trajectory_id: 'session-1',
    turn_id: 't-1',
    instance_id: 'instance-1',
    segment_index: 0,
    segment_count: 1,
    messages: [{ role: 'assistant', content: 'hello' }] as unknown[],
    tools: null,
    tokens: [1, 2, 3],
    full_logprobs: [0, -0.5, -0.25],
    full_loss_mask: [0, 1, 1],
    aligned_response_length: 2,
    finish_reason: 'stop',
    timestamp: 1,
    full_versions: ['-1', '1', '1'],
    extra_info: {
      token_build_mode: 'snapshot',
      context_token_count: 1,
      output_token_count: 2,
      num_steps: 1,
      lineage_id: 'l-1',
      lineage_index: 0,
      segment_reason: 'initial',
      segment_reasons: ['initial'],
      finalization_complete: true,
      finalization_id: 'f-1',
      segment_view: 'timeline',
      alignment_method: 'snapshot_step',
      num_turns: 1,
      turn_ids: ['t-1'],
      step_id: 'step-1',
      timestamp: '1',
      history_rewritten: false,
      trajectory_num_segments: 1,
      route_type: 'create',
      route_base_step_id: null,
    },
  };
}
