import { readFileSync } from 'node:fs';
import { DressageError } from '@dressage/protocol';
import {
  type InspectedSession,
  type SegmentView,
  statusFromFinishReasons,
  summarizeSession,
} from '../model.js';
import { forEachLine } from './lines.js';
import { inspectedSegmentOf, rewardOfRecord, type SegmentRecordLine } from './segment-records.js';
import { type InspectorSource, isJsonObject, stringOrNull } from './source.js';

// A file may hold one segment, an array of them, a `/trajectory/read` answer (`data` is a list of
// segments, or of instance groups in batch mode), or JSONL of any of these.
function collectRecords(value: unknown, into: SegmentRecordLine[]): void {
  if (Array.isArray(value)) {
    for (const item of value) collectRecords(item, into);
    return;
  }
  if (!isJsonObject(value)) return;
  const object: SegmentRecordLine & { data?: unknown } = value;
  if (Array.isArray(object.tokens)) into.push(object);
  else if (Array.isArray(object.data)) collectRecords(object.data, into);
}

/** Groups segment records into sessions by trajectory id (else session id). */
export function sessionsFromRecords(records: readonly SegmentRecordLine[]): InspectedSession[] {
  const sessions = new Map<string, InspectedSession>();
  const views = new Map<string, Set<string>>();
  for (const [position, record] of records.entries()) {
    const trajectoryId = stringOrNull(record.trajectory_id);
    const sessionId = stringOrNull(record.session_id);
    const id = trajectoryId ?? sessionId ?? `record-${position}`;
    let session = sessions.get(id);
    if (session === undefined) {
      session = {
        id,
        sessionId,
        instanceId: stringOrNull(record.instance_id),
        trajectoryId,
        reward: null,
        status: 'completed',
        removed: false,
        step: null,
        segments: [],
        metadata: {},
      };
      sessions.set(id, session);
      views.set(id, new Set());
    }
    const segment = inspectedSegmentOf(record);
    // A file that repeats a segment (two reads of one trajectory) keeps the first copy.
    const key = `${segment.view}:${segment.index}`;
    const seen = views.get(id)!;
    if (seen.has(key)) continue;
    seen.add(key);
    session.segments.push(segment);
    session.reward ??= rewardOfRecord(record);
  }
  for (const session of sessions.values()) session.status = statusFromFinishReasons(session.segments);
  return [...sessions.values()];
}

/** Reads exported trajectory files (JSON or JSONL of segments as `/trajectory/read` returns them). */
export function loadSegmentFiles(paths: readonly string[]): InspectorSource {
  const records: SegmentRecordLine[] = [];
  for (const path of paths) {
    try {
      if (path.endsWith('.jsonl')) {
        forEachLine(path, (line) => collectRecords(JSON.parse(line), records));
      } else {
        collectRecords(JSON.parse(readFileSync(path, 'utf8')), records);
      }
    } catch (error) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `Cannot read segments from ${path}: ${(error as Error).message}`,
        cause: error,
        details: { path },
      });
    }
  }
  const sessions = sessionsFromRecords(records);
  const byId = new Map(sessions.map((session) => [session.id, session]));
  const viewCounts: Partial<Record<SegmentView, number>> = {};
  for (const record of records) {
    const view = inspectedSegmentOf({ extra_info: record.extra_info }).view;
    viewCounts[view] = (viewCounts[view] ?? 0) + 1;
  }
  return {
    kind: 'file',
    path: paths.join(', '),
    summaries: sessions.map(summarizeSession),
    details: { files: paths, segments: records.length, views: viewCounts },
    load: (id) => byId.get(id),
  };
}
