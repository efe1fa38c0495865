import { randomBytes } from 'node:crypto';
import {
  type FinalizeResponse,
  isRealVersion,
  type LineageExtraInfo,
  type SegmentReason,
  type TimelineExtraInfo,
} from '@dressage/protocol';
import type { ProxyConfig } from './config.js';
import { type LineageSegment, type Session, type Step, snapshotMessages } from './session.js';
import type { StoredBlock, StoredTrajectory, StoredTrajectoryRecord } from './store-records.js';
import type { TokenBuffer } from './token-buffer.js';

/** The finalize response body (§1.10). */
export type FinalizeResult = FinalizeResponse;

/**
 * A segment's `finish_reason` as the reference's segment format has it: `segment_boundary` on
 * every segment but its trajectory's last, which keeps the engine's reason.
 */
function boundaryReason<T>(
  segmentIndex: number,
  segmentCount: number,
  engineReason: T,
): T | 'segment_boundary' {
  return segmentIndex < segmentCount - 1 ? 'segment_boundary' : engineReason;
}

function freeze(buffer: TokenBuffer, end: number, maskNonlast: boolean): StoredBlock {
  const ids = buffer.slice(0, end);
  const logprobs = buffer.logprobsUpTo(end);
  const versionRuns = buffer.versionRunsIn(0, end);
  let ranges: number[] = [...buffer.responseRanges];
  if (maskNonlast) ranges = lastVersionRanges(buffer.responseRanges, versionRuns);
  const block: StoredBlock = { ids, logprobs, maskRanges: Uint32Array.from(ranges), versionRuns };
  const routing = buffer.routing;
  if (routing !== null && !buffer.routingInvalid) {
    const rows = Math.min(routing.rows, Math.max(0, end - 1));
    block.routing = { ...routing, rows, data: routing.data.slice(0, rows * routing.width) };
  }
  return block;
}

// With --mask-nonlast-version-tokens only output produced by the segment's last real version stays
// trainable: older-version tokens keep their logprobs but get mask 0.
function lastVersionRanges(
  responseRanges: readonly number[],
  runs: ReturnType<TokenBuffer['versionRunsIn']>,
): number[] {
  let last: string | null = null;
  for (const run of runs) if (isRealVersion(run.version)) last = run.version;
  if (last === null) return [...responseRanges];
  const out: number[] = [];
  let runStart = 0;
  for (const run of runs) {
    if (run.version === last) {
      for (let index = 0; index < responseRanges.length; index += 2) {
        const start = Math.max(runStart, responseRanges[index]!);
        const end = Math.min(run.end, responseRanges[index + 1]!);
        if (end > start) out.push(start, end);
      }
    }
    runStart = run.end;
  }
  return out;
}

// A lineage record lists each hook metadata key's values over its steps, in step order (§1.10).
function lineageHookMetadata(steps: readonly Step[]): Record<string, unknown[]> | null {
  let merged: Record<string, unknown[]> | null = null;
  for (const step of steps) {
    if (step.toolCallHookMetadata === null) continue;
    merged ??= {};
    for (const [key, value] of Object.entries(step.toolCallHookMetadata)) {
      const values = merged[key] ?? [];
      values.push(value);
      merged[key] = values;
    }
  }
  return merged;
}

function distinctTurns(steps: readonly Step[]): string[] {
  return [...new Set(steps.map((step) => step.turnId))];
}

/**
 * Builds the records of a session (§1.10): in TITO mode one lineage-view record per lineage segment
 * plus one timeline record per step; in snapshot mode timeline records only.
 */
export function buildTrajectory(
  session: Session,
  config: ProxyConfig,
  label: unknown,
): { trajectory: StoredTrajectory; result: FinalizeResult } {
  const finalizationId = randomBytes(16).toString('hex');
  const tito = config.tokenBuildMode === 'tito';
  const blocks: StoredBlock[] = [];
  const records: StoredTrajectoryRecord[] = [];
  const common = (step: Step) => ({
    session_id: session.id,
    trajectory_id: session.id,
    turn_id: step.turnId,
    instance_id: session.instanceId,
    messages: snapshotMessages(step),
    tools: step.tools,
    label: label ?? null,
    finish_reason: step.finishReason,
    timestamp: step.timestamp,
  });

  const lineageSegments: Array<{ segment: LineageSegment; segmentIndexInLineage: number }> = [];
  if (tito) {
    for (const lineage of session.lineages) {
      lineage.segments.forEach((segment, index) => {
        if (segment.steps.length > 0) lineageSegments.push({ segment, segmentIndexInLineage: index });
      });
    }
  }
  const blockOfSegment = new Map<LineageSegment, number>();
  lineageSegments.forEach(({ segment }, segmentIndex) => {
    const last = segment.steps.at(-1)!;
    blockOfSegment.set(segment, blocks.length);
    blocks.push(freeze(segment.buffer, segment.buffer.length, config.maskNonlastVersionTokens));
    const extra = lineageExtraInfo(session, segment, lineageSegments.length, config, finalizationId);
    records.push({
      view: 'lineage',
      segmentIndex,
      meta: {
        uid: `${session.id}:lineage:${segmentIndex}`,
        ...common(last),
        finish_reason: boundaryReason(segmentIndex, lineageSegments.length, last.finishReason),
        segment_index: segmentIndex,
        segment_count: lineageSegments.length,
        extra_info: extra,
      },
      block: blockOfSegment.get(segment)!,
      end: segment.buffer.length,
      responseStart: null,
    });
  });

  session.steps.forEach((step, segmentIndex) => {
    let block = tito ? blockOfSegment.get(step.segment) : undefined;
    if (block === undefined) {
      block = blocks.length;
      blocks.push(freeze(step.buffer, step.responseEnd, false));
    }
    const extra = timelineExtraInfo(session, step, config, finalizationId);
    records.push({
      view: 'timeline',
      segmentIndex,
      meta: {
        uid: `${session.id}:timeline:${segmentIndex}`,
        ...common(step),
        finish_reason: boundaryReason(segmentIndex, session.steps.length, step.finishReason),
        segment_index: segmentIndex,
        segment_count: session.steps.length,
        extra_info: extra,
      },
      block,
      end: step.responseEnd,
      responseStart: step.promptEnd,
    });
  });

  const trajectory: StoredTrajectory = {
    trajectoryId: session.id,
    sessionId: session.id,
    instanceId: session.instanceId,
    finalizedAt: Date.now(),
    recordVersions: config.recordTokenVersions,
    records,
    blocks,
  };
  const result = finalizeResultOf(session, config, {
    finalizationId,
    segments: tito ? lineageSegments.length : session.steps.length,
  });
  return { trajectory, result };
}

// The extra_info of a lineage record: what the segment holds and why it starts where it does.
function lineageExtraInfo(
  session: Session,
  segment: LineageSegment,
  segmentCount: number,
  config: ProxyConfig,
  finalizationId: string,
): LineageExtraInfo {
  const last = segment.steps.at(-1)!;
  const reasons: SegmentReason[] = segment.reasons.length > 0 ? segment.reasons : ['initial'];
  const turnIds = distinctTurns(segment.steps);
  const extra: LineageExtraInfo = {
    alignment_method: 'tito',
    token_build_mode: 'tito',
    segment_view: 'lineage',
    context_token_count: segment.contextCount,
    context_delta_token_count: segment.contextCount,
    output_token_count: segment.outputCount,
    num_steps: segment.steps.length,
    num_turns: turnIds.length,
    turn_ids: turnIds,
    lineage_id: last.lineage.id,
    lineage_index: last.lineage.index,
    branch_from_step_id: last.lineage.branchFromStepId,
    step_ids: segment.steps.map((step) => step.stepId),
    timestamp: String(last.timestamp),
    history_rewritten: session.historyRewritten,
    segment_reason: reasons[0] ?? 'initial',
    segment_reasons: reasons,
    trajectory_num_segments: segmentCount,
    mask_nonlast_version_tokens: config.maskNonlastVersionTokens,
    finalization_complete: true,
    finalization_id: finalizationId,
  };
  if (segment.logprobsInvalid) extra.tito_logprobs_invalid = true;
  if (segment.incrementalFailed) extra.tito_incremental_tokenization_failed = true;
  const hooks = lineageHookMetadata(segment.steps);
  if (hooks !== null) extra.tool_call_hooks = hooks;
  return extra;
}

// The extra_info of a timeline record: one step, its route and why a segment boundary preceded it.
function timelineExtraInfo(
  session: Session,
  step: Step,
  config: ProxyConfig,
  finalizationId: string,
): TimelineExtraInfo {
  const reasons: SegmentReason[] =
    step.segmentReasonsBefore.length > 0 ? step.segmentReasonsBefore : ['initial'];
  const extra: TimelineExtraInfo = {
    alignment_method: 'snapshot_step',
    token_build_mode: config.tokenBuildMode,
    segment_view: 'timeline',
    context_token_count: step.promptEnd,
    output_token_count: step.responseEnd - step.promptEnd,
    num_steps: 1,
    num_turns: 1,
    turn_ids: [step.turnId],
    step_id: step.stepId,
    lineage_id: step.lineage.id,
    lineage_index: step.lineage.index,
    route_type: step.routeType,
    route_base_step_id: step.routeBaseStepId,
    segment_reason: reasons[0] ?? 'initial',
    segment_reasons: reasons,
    timestamp: String(step.timestamp),
    history_rewritten: session.historyRewritten,
    trajectory_num_segments: session.steps.length,
    mask_nonlast_version_tokens: config.maskNonlastVersionTokens,
    finalization_complete: true,
    finalization_id: finalizationId,
  };
  if (step.logprobsInvalid) extra.snapshot_logprobs_invalid = true;
  if (step.toolCallHookMetadata !== null) extra.tool_call_hooks = { ...step.toolCallHookMetadata };
  return extra;
}

// The answer of `/session/finalize`.
function finalizeResultOf(
  session: Session,
  config: ProxyConfig,
  counts: { finalizationId: string; segments: number },
): FinalizeResult {
  return {
    success: true,
    session_id: session.id,
    trajectory_id: session.id,
    instance_id: session.instanceId,
    finalization_id: counts.finalizationId,
    num_steps: session.steps.length,
    num_turns: session.numTurns,
    num_segments: counts.segments,
    num_timeline_segments: session.steps.length,
    history_rewritten: session.historyRewritten,
    token_build_mode: config.tokenBuildMode,
    token_build_model: config.tokenBuildModel,
    record_token_versions: config.recordTokenVersions,
    mask_nonlast_version_tokens: config.maskNonlastVersionTokens,
  };
}
