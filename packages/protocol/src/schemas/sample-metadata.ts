// Typed reads of the `Sample.metadata` keys the segment expansion writes (multi-segment's
// `writeSampleFromSegment`). Metadata is free-form: a hook or an older file may leave a key out or
// give it another type, and each accessor then answers its empty value instead of a wrong one.
import type { Sample } from './sample.js';

type WithMetadata = Pick<Sample, 'metadata'>;

function text(sample: WithMetadata, key: string): string | null {
  const value = sample.metadata[key];
  return typeof value === 'string' ? value : null;
}

/** Reads of the metadata keys a sample expanded from a segment carries. */
export const sampleMetadata = {
  /** `session_id`: the proxy session the sample's tokens were recorded in. */
  sessionId: (sample: WithMetadata): string | null => text(sample, 'session_id'),
  /** `instance_id`: the prompt (group) instance the sample answers. */
  instanceId: (sample: WithMetadata): string | null => text(sample, 'instance_id'),
  /** `parent_traj_id`: the trajectory the sample's segment belongs to. */
  trajectoryId: (sample: WithMetadata): string | null => text(sample, 'parent_traj_id'),
  /** `finish_reason`: why the segment's generation ended. */
  finishReason: (sample: WithMetadata): string | null => text(sample, 'finish_reason'),
  /** `segment_index`: the segment's place in its trajectory (0 when unset). */
  segmentIndex: (sample: WithMetadata): number => {
    const value = sample.metadata.segment_index;
    return typeof value === 'number' && Number.isInteger(value) ? value : 0;
  },
  /** `full_versions`: the weight version of every token, or null when the segment recorded none. */
  fullVersions: (sample: WithMetadata): readonly string[] | null => {
    const value = sample.metadata.full_versions;
    return Array.isArray(value) && value.every((version) => typeof version === 'string') ? value : null;
  },
  /** `messages`: the conversation of the segment (empty when unset). */
  messages: (sample: WithMetadata): readonly unknown[] => {
    const value = sample.metadata.messages;
    return Array.isArray(value) ? value : [];
  },
  /** `proxy_extra_info.segment_reason`: why the proxy started the segment. */
  segmentReason: (sample: WithMetadata): string | null => {
    const extra = sample.metadata.proxy_extra_info;
    if (extra === null || typeof extra !== 'object') return null;
    const reason = (extra as { segment_reason?: unknown }).segment_reason;
    return typeof reason === 'string' ? reason : null;
  },
} as const;
