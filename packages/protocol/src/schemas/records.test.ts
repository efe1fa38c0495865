import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { safeParseWire, type ValidationIssue } from '../validation.js';
import { lineageSegment, stepRecord, timelineSegment } from './__fixtures__/payloads.js';
import { createSample, SampleStatus, sampleSchema } from './sample.js';
import { segmentSchema, segmentShapeSchema, versionLabel } from './segment.js';
import { stepRecordSchema } from './step-record.js';
import { trainBatchSchema } from './train-batch.js';

function paths(schema: z.ZodType, value: unknown): string[] {
  const result = safeParseWire(schema, value);
  return result.success ? [] : (result.error.details.issues as ValidationIssue[]).map((issue) => issue.path);
}

describe('segment', () => {
  it('accepts the lineage view of the reference example', () => {
    const segment = segmentSchema.parse(lineageSegment());
    expect(segment.extra_info.segment_view).toBe('lineage');
    expect(segment.aligned_response_length).toBe(11);
    if (segment.extra_info.segment_view === 'lineage') expect(segment.extra_info.step_ids).toHaveLength(2);
  });

  it('accepts a timeline view record', () => {
    const segment = segmentSchema.parse(timelineSegment());
    expect(segment.extra_info.segment_view).toBe('timeline');
    if (segment.extra_info.segment_view === 'timeline') expect(segment.extra_info.route_type).toBe('append');
  });

  it('requires the turn and trajectory fields of a timeline record', () => {
    const { turn_ids: _turns, trajectory_num_segments: _count, ...extra } = timelineSegment().extra_info;
    expect(paths(segmentSchema, { ...timelineSegment(), extra_info: extra })).toEqual([
      'extra_info.turn_ids',
      'extra_info.trajectory_num_segments',
    ]);
  });

  it('rejects arrays of different lengths, naming the field', () => {
    const segment = lineageSegment();
    segment.full_logprobs.pop();
    expect(paths(segmentSchema, segment)).toEqual(['full_logprobs']);
    const versions = lineageSegment();
    versions.full_versions.push('3');
    expect(paths(segmentSchema, versions)).toEqual(['full_versions']);
  });

  it('reads version labels as the reference does: numbers stringified, null as unknown', () => {
    const segment = lineageSegment();
    const labels: unknown[] = segment.full_versions.map((_, index) =>
      index === 0 ? null : index < 3 ? 7 : '8',
    );
    const parsed = segmentSchema.parse({ ...segment, full_versions: labels });
    expect(parsed.full_versions?.slice(0, 4)).toEqual(['unknown', '7', '7', '8']);
    const shaped = segmentShapeSchema.parse({ ...segment, full_versions: labels });
    expect(shaped.full_versions?.slice(0, 4)).toEqual(['unknown', '7', '7', '8']);
    // A record without versions, or with null for the whole list, has none.
    expect(segmentSchema.parse({ ...segment, full_versions: null }).full_versions).toBeUndefined();
    expect(versionLabel(3.5)).toBe('3.5');
  });

  it('rejects an aligned_response_length that disagrees with the mask', () => {
    expect(paths(segmentSchema, { ...lineageSegment(), aligned_response_length: 10 })).toEqual([
      'aligned_response_length',
    ]);
  });

  it('rejects non-binary masks, negative ids, a bad view and an out-of-range index', () => {
    const mask = lineageSegment();
    mask.full_loss_mask[0] = 2;
    expect(paths(segmentSchema, mask)).toContain('full_loss_mask[0]');
    const ids = lineageSegment();
    ids.tokens[3] = -5;
    expect(paths(segmentSchema, ids)).toEqual(['tokens[3]']);
    const view = lineageSegment();
    (view.extra_info as { segment_view: string }).segment_view = 'session';
    expect(paths(segmentSchema, view)).toEqual(['extra_info.segment_view']);
    expect(paths(segmentSchema, { ...lineageSegment(), segment_index: 1 })).toEqual(['segment_index']);
    const reason = lineageSegment();
    (reason.extra_info as { segment_reason: string }).segment_reason = 'because';
    expect(paths(segmentSchema, reason)).toEqual(['extra_info.segment_reason']);
  });

  it('rejects an empty token list', () => {
    expect(
      paths(segmentSchema, {
        ...lineageSegment(),
        tokens: [],
        full_logprobs: [],
        full_loss_mask: [],
        full_versions: [],
        aligned_response_length: 0,
      }),
    ).toEqual(['tokens']);
  });
});

describe('step record', () => {
  it('accepts a complete step', () => {
    const step = stepRecordSchema.parse(stepRecord());
    expect(step.route_type).toBe('append');
    expect(step.concat_context_token_count + step.concat_output_token_count).toBe(
      step.concat_token_ids.length,
    );
  });

  it('checks the length invariants between its arrays', () => {
    const step = stepRecord();
    step.all_token_ids.push(1);
    expect(paths(stepRecordSchema, step)).toEqual(['all_token_ids', 'all_logprobs', 'all_versions']);
    const concat = stepRecord();
    concat.concat_response_mask.pop();
    expect(paths(stepRecordSchema, concat)).toEqual(['concat_response_mask']);
    expect(paths(stepRecordSchema, { ...stepRecord(), concat_context_token_count: 3 })).toEqual([
      'concat_output_token_count',
    ]);
  });

  it('checks id formats and enumerations', () => {
    expect(paths(stepRecordSchema, { ...stepRecord(), step_id: 'step-1' })).toEqual(['step_id']);
    expect(paths(stepRecordSchema, { ...stepRecord(), route_type: 'merge' })).toEqual(['route_type']);
    expect(
      paths(stepRecordSchema, { ...stepRecord(), segment_reasons_before: ['tools_changed', 'x'] }),
    ).toEqual(['segment_reasons_before[1]']);
  });
});

describe('sample', () => {
  it('fills slime defaults for every field', () => {
    const sample = createSample();
    expect(sample).toMatchObject({
      group_index: null,
      index: null,
      rollout_id: null,
      prompt: '',
      tokens: [],
      response: '',
      response_length: 0,
      reward: null,
      loss_mask: null,
      weight_versions: [],
      rollout_log_probs: null,
      remove_sample: false,
      status: 'pending',
      metadata: {},
      session_id: null,
      non_generation_time: 0,
      spec_info: {
        spec_accept_token_num: 0,
        spec_draft_token_num: 0,
        spec_verify_ct: 0,
        completion_token_num: 0,
      },
      prefix_cache_info: { cached_tokens: 0, total_prompt_tokens: 0 },
    });
  });

  it('accepts a multi-turn sample with every status value', () => {
    for (const status of Object.values(SampleStatus)) {
      const sample = createSample({
        index: 3,
        group_index: 1,
        rollout_id: 3,
        prompt: [{ role: 'user', content: 'q' }],
        tokens: [1, 2, 3, 4, 5],
        response_length: 3,
        loss_mask: [1, 0, 1],
        rollout_log_probs: [-0.1, 0, -0.2],
        reward: { score: 1, format: 0.5 },
        status,
      });
      expect(sample.status).toBe(status);
    }
  });

  it('checks mask and logprob lengths against response_length', () => {
    expect(paths(sampleSchema, { tokens: [1, 2], response_length: 3 })).toEqual(['response_length']);
    expect(paths(sampleSchema, { tokens: [1, 2, 3], response_length: 2, loss_mask: [1] })).toEqual([
      'loss_mask',
    ]);
    expect(
      paths(sampleSchema, { tokens: [1, 2, 3], response_length: 2, rollout_log_probs: [0, 0, 0] }),
    ).toEqual(['rollout_log_probs']);
    expect(paths(sampleSchema, { status: 'done' })).toEqual(['status']);
    expect(() => createSample({ tokens: [1], response_length: 2 })).toThrow(
      /Invalid sample: response_length/,
    );
  });
});

describe('train batch', () => {
  // The reference's worked prompt-equal example: p1 has t1 (two segments) and t2; p2 has t3.
  const batch = {
    tokens: [
      [1, 2, 3, 4],
      [1, 2, 5, 6],
      [7, 8, 9],
      [10, 11, 12, 13, 14],
    ],
    response_lengths: [3, 3, 2, 4],
    rewards: [0.5, 0.5, -0.5, 0],
    raw_reward: [0, 1, 0, 1],
    truncated: [0, 0, 0, 1],
    sample_indices: [0, 0, 1, 2],
    rollout_ids: [0, 0, 1, 2],
    loss_masks: [
      [1, 1, 1],
      [1, 0, 1],
      [1, 1],
      [1, 1, 1, 1],
    ],
    rollout_mask_sums: [3.5, 3.5, 3.5, 2.0],
    rollout_log_probs: [
      [-0.1, -0.2, -0.3],
      [-0.1, 0, -0.3],
      [-1, -2],
      [-0.5, -0.5, -0.5, -0.5],
    ],
  };

  it('accepts slime train_data', () => {
    expect(trainBatchSchema.parse(batch).rollout_mask_sums).toEqual([3.5, 3.5, 3.5, 2.0]);
  });

  it('rejects per-sample arrays of the wrong length and masks that do not cover the response', () => {
    expect(paths(trainBatchSchema, { ...batch, rewards: [1, 2, 3] })).toEqual(['rewards']);
    expect(
      paths(trainBatchSchema, {
        ...batch,
        loss_masks: [
          [1, 1, 1],
          [1, 0],
          [1, 1],
          [1, 1, 1, 1],
        ],
      }),
    ).toEqual(['loss_masks[1]']);
    expect(paths(trainBatchSchema, { ...batch, response_lengths: [3, 3, 4, 4] })).toEqual([
      'response_lengths[2]',
      'loss_masks[2]',
      'rollout_log_probs[2]',
    ]);
    expect(paths(trainBatchSchema, { ...batch, rollout_mask_sums: [3.5, 3.5, -1, 2] })).toEqual([
      'rollout_mask_sums[2]',
    ]);
    expect(paths(trainBatchSchema, { ...batch, total_lengths: [4, 4, 3, 6] })).toEqual(['total_lengths[3]']);
  });
});
