import type { Sample } from '@dressage/protocol';

/** A short human label of a sample for error messages: its index, group and session. */
export function describeSample(
  sample: Pick<Sample, 'index' | 'group_index' | 'session_id' | 'metadata'>,
): string {
  const parts: string[] = [];
  if (sample.index !== null && sample.index !== undefined) parts.push(`index ${sample.index}`);
  if (sample.group_index !== null && sample.group_index !== undefined)
    parts.push(`group ${sample.group_index}`);
  const metadata = sample.metadata ?? {};
  const session = metadata.parent_traj_id ?? metadata.session_id ?? sample.session_id;
  if (typeof session === 'string' && session !== '') parts.push(`session ${session}`);
  if (typeof metadata.segment_index === 'number') parts.push(`segment ${metadata.segment_index}`);
  return parts.length === 0 ? 'sample (no index)' : `sample (${parts.join(', ')})`;
}
