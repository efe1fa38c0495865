import { createSample, type Sample } from '@dressage/protocol';
import type { SegmentInput } from '../segment-input.js';

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

/** A segment with per-token arrays derived from `mask`: tokens 100+i, logprob -0.1 on trainable tokens. */
export function segment(
  segmentIndex: number,
  mask: readonly (0 | 1)[],
  fields: Partial<SegmentInput> = {},
): SegmentInput {
  return {
    uid: `uid-${segmentIndex}`,
    session_id: 'session-1',
    instance_id: 'instance-1',
    segment_index: segmentIndex,
    segment_count: 1,
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: `reply ${segmentIndex}` },
    ],
    tokens: mask.map((_, i) => 100 + i),
    full_logprobs: mask.map((value) => (value === 1 ? -0.1 : 0)),
    full_loss_mask: [...mask],
    finish_reason: 'stop',
    extra_info: { segment_view: 'lineage' },
    ...fields,
  };
}
