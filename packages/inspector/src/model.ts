/** Which record view a segment belongs to: the proxy's two views, or a trainer-exported sample. */
export type SegmentView = 'lineage' | 'timeline' | 'sample';

/** One training sequence with its per-token arrays, all aligned to `tokens`. */
export interface InspectedSegment {
  view: SegmentView;
  /** `segment_index` within its view. */
  index: number;
  tokens: number[];
  /** 1 where the token is trained on, over every token. */
  lossMask: number[];
  /** Rollout logprobs over every token (0 on context tokens). */
  logprobs: number[];
  /** Weight version per token (`"-1"` for context), or null when not recorded. */
  versions: string[] | null;
  /** The conversation the agent saw (the segment's last message snapshot). */
  messages: unknown[];
  /** Why this segment started (`extra_info.segment_reason`). */
  reason: string | null;
  /** Every reason recorded for the boundary (`extra_info.segment_reasons`). */
  reasons: string[];
  finishReason: string | null;
  extraInfo: Record<string, unknown>;
}

/** One session (trajectory) with every segment of every view it has. */
export interface InspectedSession {
  /** Unique key of the session in its source. */
  id: string;
  sessionId: string | null;
  instanceId: string | null;
  trajectoryId: string | null;
  reward: number | null;
  /** `completed`, `truncated`, `aborted`, `failed`, … (sample status or derived from finish reasons). */
  status: string;
  /** The trainer dropped it (`remove_sample`). */
  removed: boolean;
  /** RL step it was trained in (run directories only). */
  step: number | null;
  segments: InspectedSegment[];
  metadata: Record<string, unknown>;
}

/** What the session list shows and filters on; computed once when a source is indexed. */
export interface SessionSummary {
  id: string;
  sessionId: string | null;
  instanceId: string | null;
  reward: number | null;
  status: string;
  step: number | null;
  /** Segments in the session's default view. */
  segmentCount: number;
  tokenCount: number;
  trainableCount: number;
  /** Distinct weight versions of model-output tokens, in first-seen order. */
  versions: string[];
  aborted: boolean;
  truncated: boolean;
  multiVersion: boolean;
  /** Distinct segment boundary reasons. */
  reasons: string[];
}

/** Tokens that were not produced by the model carry this version. */
export const contextVersion = '-1';

/** The view shown by default: lineage when present, else timeline, else trainer samples. */
export function defaultView(segments: readonly InspectedSegment[]): SegmentView {
  if (segments.some((segment) => segment.view === 'lineage')) return 'lineage';
  if (segments.some((segment) => segment.view === 'timeline')) return 'timeline';
  return 'sample';
}

/** The segments of one view, sorted by index. */
export function segmentsOfView(session: InspectedSession, view: SegmentView): InspectedSegment[] {
  return session.segments.filter((segment) => segment.view === view).sort((a, b) => a.index - b.index);
}

const abortedFinishReasons = new Set(['abort', 'aborted', 'preempt', 'preempted', 'cancel', 'cancelled']);

/** Derives a status from segment finish reasons when the source records none. */
export function statusFromFinishReasons(segments: readonly InspectedSegment[]): string {
  let status = 'completed';
  for (const segment of segments) {
    if (segment.finishReason === null) continue;
    if (abortedFinishReasons.has(segment.finishReason)) return 'aborted';
    if (segment.finishReason === 'length') status = 'truncated';
  }
  return status;
}

/** Computes the list row of a session. */
export function summarizeSession(session: InspectedSession): SessionSummary {
  const segments = segmentsOfView(session, defaultView(session.segments));
  const versions: string[] = [];
  const seen = new Set<string>();
  const reasons = new Set<string>();
  let tokenCount = 0;
  let trainableCount = 0;
  for (const segment of segments) {
    tokenCount += segment.tokens.length;
    for (const value of segment.lossMask) trainableCount += value;
    if (segment.reason !== null) reasons.add(segment.reason);
    for (const reason of segment.reasons) reasons.add(reason);
    if (segment.versions === null) continue;
    for (const version of segment.versions) {
      if (version === contextVersion || version === '' || seen.has(version)) continue;
      seen.add(version);
      versions.push(version);
    }
  }
  return {
    id: session.id,
    sessionId: session.sessionId,
    instanceId: session.instanceId,
    reward: session.reward,
    status: session.status,
    step: session.step,
    segmentCount: segments.length,
    tokenCount,
    trainableCount,
    versions,
    aborted: session.status === 'aborted',
    truncated: session.status === 'truncated',
    multiVersion: versions.length > 1,
    reasons: [...reasons],
  };
}
