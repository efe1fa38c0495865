import { createSample, type LineageExtraInfo, type Sample, type Segment } from '@dressage/protocol';

/** A template as the data source produces it. */
export function template(fields: Parameters<typeof createSample>[0] = {}): Sample {
  return createSample({
    index: 7,
    group_index: 3,
    prompt: 'Fix the bug',
    label: 'done',
    session_id: 'session-1',
    metadata: { instance_id: 'instance-1' },
    ...fields,
  });
}

/** Fields of {@link segment} to override; `extra_info` is merged into a lineage-view default. */
export type SegmentFields = Partial<Omit<Segment, 'extra_info'>> & {
  extra_info?: Partial<LineageExtraInfo>;
};

/**
 * A segment as `ProxyClient.readTrajectory` returns it, with per-token arrays derived from `mask`:
 * tokens 100+i, logprob -0.1 on trainable tokens.
 */
export function segment(segmentIndex: number, mask: readonly (0 | 1)[], fields: SegmentFields = {}): Segment {
  const { extra_info: extraInfo, ...rest } = fields;
  const trainable = mask.filter((value) => value === 1).length;
  return {
    uid: `uid-${segmentIndex}`,
    session_id: 'session-1',
    trajectory_id: 'session-1',
    turn_id: null,
    instance_id: 'instance-1',
    segment_index: segmentIndex,
    segment_count: segmentIndex + 1,
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: `reply ${segmentIndex}` },
    ],
    tools: null,
    tokens: Int32Array.from(mask, (_, i) => 100 + i),
    full_logprobs: Float64Array.from(mask, (value) => (value === 1 ? -0.1 : 0)),
    full_loss_mask: Uint8Array.from(mask),
    aligned_response_length: trainable,
    finish_reason: 'stop',
    timestamp: 1,
    extra_info: {
      token_build_mode: 'tito',
      context_token_count: mask.length - trainable,
      output_token_count: trainable,
      num_steps: 1,
      lineage_id: 'lineage-1',
      lineage_index: 0,
      segment_reason: 'initial',
      segment_reasons: ['initial'],
      finalization_complete: true,
      finalization_id: 'finalization-1',
      segment_view: 'lineage',
      alignment_method: 'tito',
      context_delta_token_count: 0,
      num_turns: 1,
      turn_ids: [],
      branch_from_step_id: null,
      step_ids: ['step-1'],
      timestamp: '1',
      history_rewritten: false,
      trajectory_num_segments: segmentIndex + 1,
      ...extraInfo,
    },
    ...rest,
  };
}
