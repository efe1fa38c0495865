import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { type SerializedTrajectory, storeLogName, unpackTypedArray } from '@dressage/protocol/internal';
import { contextVersion, type InspectedSegment, type InspectedSession, summarizeSession } from '../model.js';
import { forEachLine, readLineAt } from './lines.js';
import { inspectedSegmentOf, rewardOfRecord } from './segment-records.js';
import { type InspectorSource, numberOrNull, stringOrNull } from './source.js';

/** The log file inside a proxy store directory (`packages/proxy` `TrajectoryStore`). */
export { storeLogName };

function unpack<K extends 'int32' | 'float32' | 'uint32'>(base64: string, type: K, field: string) {
  return unpackTypedArray(Buffer.from(base64, 'base64'), type, { field });
}

// The shortest decimal that maps back to the same float32 (-0.1, not -0.10000000149011612), matching
// what `/trajectory/read` prints.
function shortestFloat32(value: number): number {
  if (value === 0) return 0;
  for (let precision = 6; precision <= 9; precision++) {
    const candidate = Number(value.toPrecision(precision));
    if (Math.fround(candidate) === value) return candidate;
  }
  return value;
}

// Materialises records the way the proxy's `/trajectory/read` does: mask ranges (lineage) or the
// response tail (timeline), logprobs on model output, version runs with "-1" on a timeline prompt.
function segmentsOfTrajectory(trajectory: SerializedTrajectory): InspectedSegment[] {
  const blocks = trajectory.blocks.map((block) => ({
    ids: unpack(block.ids, 'int32', 'ids'),
    logprobs: unpack(block.logprobs, 'float32', 'logprobs'),
    maskRanges: unpack(block.mask_ranges, 'uint32', 'mask_ranges'),
    versions: block.versions,
  }));
  return trajectory.records.map((record) => {
    const block = blocks[record.block];
    const length = block === undefined ? 0 : Math.min(record.end, block.ids.length);
    const tokens = new Array<number>(length);
    const logprobs = new Array<number>(length).fill(0);
    const lossMask = new Array<number>(length).fill(0);
    let versions: string[] | null = null;
    if (block !== undefined) {
      for (let index = 0; index < length; index++) tokens[index] = block.ids[index]!;
      const ranges = record.response_start === null ? block.maskRanges : [record.response_start, record.end];
      for (let range = 0; range + 1 < ranges.length; range += 2) {
        for (let index = ranges[range]!; index < Math.min(ranges[range + 1]!, length); index++)
          lossMask[index] = 1;
      }
      for (let index = record.response_start ?? 0; index < length; index++)
        logprobs[index] = Math.fround(block.logprobs[index] ?? 0);
      if (trajectory.record_versions) {
        versions = new Array<string>(length).fill(contextVersion);
        let start = 0;
        for (const [end, version] of block.versions) {
          versions.fill(version, start, Math.min(end, length));
          start = end;
        }
        if (record.response_start !== null) versions.fill(contextVersion, 0, record.response_start);
      }
    }
    // A line lists each message once; its records name them by index.
    const meta =
      record.message_refs === undefined
        ? record.meta
        : { ...record.meta, messages: record.message_refs.map((index) => trajectory.messages?.[index]) };
    const segment = inspectedSegmentOf({ ...meta, segment_index: record.segment_index });
    return {
      ...segment,
      view: record.view,
      tokens,
      lossMask,
      logprobs: logprobs.map(shortestFloat32),
      versions,
    };
  });
}

function sessionOfTrajectory(trajectory: SerializedTrajectory): InspectedSession {
  const segments = segmentsOfTrajectory(trajectory);
  let reward: number | null = null;
  for (const record of trajectory.records) reward ??= rewardOfRecord(record.meta);
  const aborted = segments.some((segment) => segment.finishReason === 'abort');
  const truncated = segments.some((segment) => segment.finishReason === 'length');
  return {
    id: trajectory.trajectory_id,
    sessionId: stringOrNull(trajectory.session_id),
    instanceId: stringOrNull(trajectory.instance_id),
    trajectoryId: trajectory.trajectory_id,
    reward,
    status: aborted ? 'aborted' : truncated ? 'truncated' : 'completed',
    removed: false,
    step: null,
    segments,
    metadata: { finalized_at: numberOrNull(trajectory.finalized_at) },
  };
}

/**
 * Reads a proxy trajectory store directory read-only: replays the append-only log (later puts win,
 * `drop` tombstones remove), indexes every live trajectory, and keeps only each line's offset so a
 * session's token data is read back from disk when it is opened. Never compacts or writes.
 */
export function loadStoreDirectory(directory: string): InspectorSource {
  const path = statSync(directory, { throwIfNoEntry: false })?.isFile()
    ? directory
    : join(directory, storeLogName);
  if (!existsSync(path)) {
    throw new DressageError({
      code: 'not_found',
      message: `${directory} has no ${storeLogName} (is it a proxy --store-dir?)`,
      details: { path: directory },
    });
  }
  const live = new Map<
    string,
    { offset: number; byteLength: number; summary: ReturnType<typeof summarizeSession> }
  >();
  let tornLines = 0;
  let tombstones = 0;
  forEachLine(path, (line, offset, byteLength) => {
    let parsed: { op?: unknown; trajectory?: SerializedTrajectory; trajectory_id?: unknown };
    try {
      parsed = JSON.parse(line);
    } catch {
      tornLines += 1; // A crash mid-append: the proxy never acknowledged that trajectory.
      return;
    }
    if (parsed.op === 'put' && parsed.trajectory) {
      const summary = summarizeSession(sessionOfTrajectory(parsed.trajectory));
      // Re-insert so the list order follows the latest put, as the proxy's replay does.
      live.delete(parsed.trajectory.trajectory_id);
      live.set(parsed.trajectory.trajectory_id, { offset, byteLength, summary });
    } else if (parsed.op === 'drop' && typeof parsed.trajectory_id === 'string') {
      tombstones += 1;
      live.delete(parsed.trajectory_id);
    }
  });
  return {
    kind: 'store',
    path: directory,
    summaries: [...live.values()].map((entry) => entry.summary),
    details: { log: path, tombstones, tornLines },
    load: (id) => {
      const entry = live.get(id);
      if (entry === undefined) return undefined;
      const parsed = JSON.parse(readLineAt(path, entry.offset, entry.byteLength)) as {
        trajectory: SerializedTrajectory;
      };
      return sessionOfTrajectory(parsed.trajectory);
    },
  };
}
