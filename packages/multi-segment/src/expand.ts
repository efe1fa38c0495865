import { DressageError, type Sample, type Segment } from '@dressage/protocol';
import { type WriteSampleOptions, writeSampleFromSegment } from './write-sample.js';

/** Options of {@link expandSegmentsToSamples}. */
export interface ExpandOptions
  extends Pick<
    WriteSampleOptions,
    | 'agentResponse'
    | 'maxTokensPerGpu'
    | 'contextParallelSize'
    | 'maskNonlastVersionTokens'
    | 'useRolloutRoutingReplay'
    | 'numLayers'
    | 'moeRouterTopk'
  > {
  /** The trajectory's session. Default: `template.session_id`, else the segments' `session_id`. */
  sessionId?: string | null;
  /** The prompt instance. Default: `template.metadata.instance_id`, else the segments' `instance_id`. */
  instanceId?: string | null;
}

function nonEmpty(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

/**
 * Turns the finalized segments of one trajectory into training samples, one per segment, in
 * `segment_index` order. All samples share `rollout_id = template.index` (so slime keeps them in one
 * step), `metadata.parent_traj_id` (the session) and `metadata.instance_id`, and record their
 * `metadata.segment_index`. The last segment is the trajectory's anchor and keeps the template's
 * reward (normally unset, so the reward model runs once per trajectory); every other segment gets
 * reward 0.
 *
 * The segments are `Segment`s as `ProxyClient.readTrajectory` returns them, each already checked
 * by its schema. What no single segment's schema can see is checked here, so that a bad trajectory
 * fails where it was produced, with its session named: an empty list, a `segment_index` that appears
 * twice, and a template without the `index` or `group_index` conversion needs.
 */
export function expandSegmentsToSamples(
  template: Sample,
  segments: readonly Segment[],
  options: ExpandOptions = {},
): Sample[] {
  const first = segments[0];
  if (first === undefined) {
    const label = nonEmpty(options.sessionId) ?? nonEmpty(template.session_id) ?? '(no session id)';
    throw new DressageError({
      code: 'invalid_argument',
      message: `Session ${label}: no segments to expand`,
      details: { session_id: label },
    });
  }
  // A segment always names its session and instance; explicit options and the template come first.
  const sessionId = nonEmpty(options.sessionId) ?? nonEmpty(template.session_id) ?? first.session_id;
  const instanceId =
    nonEmpty(options.instanceId) ?? nonEmpty(template.metadata.instance_id) ?? first.instance_id;
  if (template.index === null) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Session ${sessionId}: the template has no index, so its segments cannot share a rollout_id`,
      details: { session_id: sessionId },
    });
  }
  if (template.group_index === null) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Session ${sessionId}: the template has no group_index, which reward normalisation groups by`,
      details: { session_id: sessionId },
    });
  }

  const ordered = [...segments].sort((a, b) => a.segment_index - b.segment_index);
  for (let i = 1; i < ordered.length; i++) {
    const index = ordered[i]?.segment_index;
    if (index === ordered[i - 1]?.segment_index) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `Session ${sessionId}: segment_index ${index} appears more than once`,
        details: { session_id: sessionId, segment_index: index },
      });
    }
  }

  const uids = ordered.map((segment) => segment.uid);
  const last = ordered.length - 1;
  return ordered.map((segment, position) => {
    const sample = writeSampleFromSegment(template, segment, {
      sessionId,
      instanceId,
      agentResponse: options.agentResponse ?? null,
      maxTokensPerGpu: options.maxTokensPerGpu ?? null,
      contextParallelSize: options.contextParallelSize ?? null,
      maskNonlastVersionTokens: options.maskNonlastVersionTokens ?? false,
      useRolloutRoutingReplay: options.useRolloutRoutingReplay ?? false,
      numLayers: options.numLayers ?? null,
      moeRouterTopk: options.moeRouterTopk ?? null,
      segmentCount: ordered.length,
      allSegmentUids: uids,
    });
    sample.rollout_id = template.index;
    sample.metadata.parent_traj_id = sessionId;
    sample.metadata.segment_index = segment.segment_index;
    if (position !== last) sample.reward = 0;
    return sample;
  });
}
