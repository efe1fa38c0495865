import type { SegmentMeta } from '@dressage/protocol';

/** The non-token fields of a lineage record, as finalize writes them, for stores built by hand. */
export function segmentMeta(uid: string, fields: Partial<SegmentMeta> = {}): SegmentMeta {
  return {
    uid,
    session_id: 's',
    trajectory_id: 's',
    turn_id: 'turn-0',
    instance_id: 'g',
    segment_index: 0,
    segment_count: 1,
    messages: [],
    tools: null,
    finish_reason: 'stop',
    timestamp: 0,
    extra_info: {
      segment_view: 'lineage',
      alignment_method: 'tito',
      token_build_mode: 'tito',
      context_token_count: 0,
      context_delta_token_count: 0,
      output_token_count: 0,
      num_steps: 1,
      num_turns: 1,
      turn_ids: ['turn-0'],
      lineage_id: 'lineage-0',
      lineage_index: 0,
      branch_from_step_id: null,
      step_ids: ['step-0'],
      timestamp: '0',
      history_rewritten: false,
      segment_reason: 'initial',
      segment_reasons: ['initial'],
      trajectory_num_segments: 1,
      finalization_complete: true,
      finalization_id: 'f',
    },
    ...fields,
  };
}
