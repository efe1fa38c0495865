import { createHash } from 'node:crypto';
import { type Sample, SampleStatus } from '@dressage/protocol';

/** Options of {@link markAbortedNoGrad}. */
export interface MarkAbortedOptions {
  /** The failed attempt's session, when the caller knows it. */
  sessionId?: string | null;
  /** The prompt instance, when the caller knows it. */
  instanceId?: string | null;
}

function nonEmpty(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

// Sorted keys make the text, and so the id, independent of property order.
function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.keys(value)
      .sort()
      // `value` is a non-array object here, so its own keys index it.
      .map((key) => `${JSON.stringify(key)}:${stableJson((value as Record<string, unknown>)[key])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * The id given to an aborted sample that has no session or instance of its own: a hash of what
 * identifies the sample (group, index, prompt, label), so the same sample always gets the same id.
 */
export function abortedTrajectoryId(
  sample: Pick<Sample, 'group_index' | 'index' | 'prompt' | 'label'>,
): string {
  const identity = stableJson({
    group_index: sample.group_index,
    index: sample.index,
    prompt: sample.prompt,
    label: sample.label ?? null,
  });
  return `aborted-${createHash('sha256').update(identity).digest('hex').slice(0, 16)}`;
}

/**
 * Turns a sample whose rollout failed for good into a no-gradient placeholder that still flows
 * through conversion (it keeps its place in its group but trains nothing): `remove_sample`, status
 * `failed`, reward 0, no response tokens (`tokens` kept, or `[0]` when empty), empty loss mask and
 * logprobs. Returns a new sample; the input is not modified.
 *
 * Ids: an existing `metadata.parent_traj_id` or `metadata.instance_id` is never overwritten. A
 * missing trajectory id falls back to the given session, the sample's own session, the given
 * instance, the sample's own instance, and only then to {@link abortedTrajectoryId}. A missing
 * instance id falls back to the given instance, then the trajectory id. The failed session is kept
 * in `metadata.last_failed_session_id` and the session itself is cleared.
 */
export function markAbortedNoGrad(sample: Sample, options: MarkAbortedOptions = {}): Sample {
  const metadata = structuredClone(sample.metadata);
  const ownSession = nonEmpty(metadata.session_id) ?? nonEmpty(sample.session_id);
  const ownInstance = nonEmpty(metadata.instance_id);
  const parent =
    nonEmpty(metadata.parent_traj_id) ??
    nonEmpty(options.sessionId) ??
    ownSession ??
    nonEmpty(options.instanceId) ??
    ownInstance ??
    abortedTrajectoryId(sample);
  metadata.parent_traj_id = parent;
  metadata.instance_id = ownInstance ?? nonEmpty(options.instanceId) ?? parent;
  const failedSession = nonEmpty(options.sessionId) ?? ownSession;
  if (failedSession !== null) metadata.last_failed_session_id = failedSession;
  delete metadata.session_id;
  return {
    ...sample,
    metadata,
    session_id: null,
    remove_sample: true,
    status: SampleStatus.FAILED,
    reward: 0,
    tokens: sample.tokens.length > 0 ? [...sample.tokens] : [0],
    response_length: 0,
    loss_mask: [],
    rollout_log_probs: [],
    teacher_log_probs: null,
    rollout_top_p_token_ids: null,
    rollout_top_p_token_offsets: null,
  };
}
