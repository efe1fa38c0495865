import type { InspectedSegment, SegmentView } from '../model.js';
import { fitNumbers, numberOrNull, objectOrEmpty, stringArray, stringOrNull } from './source.js';

/**
 * One segment as `/trajectory/read` returns it, read leniently: each field is checked where it is
 * read, so a record from an older or broken writer still shows.
 */
export interface SegmentRecordLine {
  tokens?: unknown;
  extra_info?: unknown;
  full_versions?: unknown;
  segment_index?: unknown;
  full_loss_mask?: unknown;
  full_logprobs?: unknown;
  messages?: unknown;
  finish_reason?: unknown;
  reward?: unknown;
  label?: unknown;
  trajectory_id?: unknown;
  session_id?: unknown;
  instance_id?: unknown;
}

function viewOf(extraInfo: Record<string, unknown>): SegmentView {
  return extraInfo.segment_view === 'lineage' ? 'lineage' : 'timeline';
}

/**
 * Converts one segment as `/trajectory/read` returns it. Reading is lenient (missing arrays become
 * zeros) because an inspector is most useful exactly when a record looks wrong.
 */
export function inspectedSegmentOf(record: SegmentRecordLine): InspectedSegment {
  const tokens = fitNumbers(record.tokens, Array.isArray(record.tokens) ? record.tokens.length : 0, 0);
  const extraInfo = objectOrEmpty(record.extra_info);
  const versions = Array.isArray(record.full_versions) ? stringArray(record.full_versions) : null;
  const reason = stringOrNull(extraInfo.segment_reason);
  const reasons = stringArray(extraInfo.segment_reasons);
  return {
    view: viewOf(extraInfo),
    index: numberOrNull(record.segment_index) ?? 0,
    tokens,
    lossMask: fitNumbers(record.full_loss_mask, tokens.length, 0),
    logprobs: fitNumbers(record.full_logprobs, tokens.length, 0),
    versions: versions !== null && versions.length === tokens.length ? versions : null,
    messages: Array.isArray(record.messages) ? record.messages : [],
    reason,
    reasons: reasons.length > 0 ? reasons : reason === null ? [] : [reason],
    finishReason: stringOrNull(record.finish_reason),
    extraInfo,
  };
}

/** A reward recorded beside a segment (`reward`, `extra_info.reward` or a numeric `label`). */
export function rewardOfRecord(record: SegmentRecordLine): number | null {
  return (
    numberOrNull(record.reward) ??
    numberOrNull(objectOrEmpty(record.extra_info).reward) ??
    numberOrNull(record.label)
  );
}
