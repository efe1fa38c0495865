import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { type InspectedSegment, type InspectedSession, summarizeSession } from '../model.js';
import { forEachLine } from './lines.js';
import {
  fitNumbers,
  type InspectorSource,
  isJsonObject,
  numberOrNull,
  objectOrEmpty,
  type RunErrorLine,
  stringArray,
  stringOrNull,
} from './source.js';

/**
 * One line of `samples/step-NNNNNN.jsonl` (the trainer's `ExportedSample`) as read: each field is
 * checked where it is read, so a line from an older trainer still shows.
 */
export interface SampleLine {
  tokens?: unknown;
  prompt_length?: unknown;
  loss_mask?: unknown;
  rollout_log_probs?: unknown;
  full_versions?: unknown;
  segment_reason?: unknown;
  segment_index?: unknown;
  metadata?: unknown;
  messages?: unknown;
  session_id?: unknown;
  trajectory_id?: unknown;
  instance_id?: unknown;
  step?: unknown;
  index?: unknown;
  status?: unknown;
  reward?: unknown;
  remove_sample?: unknown;
}

/** Converts one line of `samples/step-NNNNNN.jsonl` (the trainer's `ExportedSample`). */
export function segmentFromSample(sample: SampleLine): InspectedSegment {
  const tokens = fitNumbers(sample.tokens, Array.isArray(sample.tokens) ? sample.tokens.length : 0, 0);
  const promptLength = Math.min(numberOrNull(sample.prompt_length) ?? 0, tokens.length);
  const responseLength = tokens.length - promptLength;
  // The sample's mask and logprobs cover the response tail; the view wants them over every token.
  const lossMask = [
    ...new Array<number>(promptLength).fill(0),
    ...fitNumbers(sample.loss_mask, responseLength, 0),
  ];
  const logprobs = [
    ...new Array<number>(promptLength).fill(0),
    ...fitNumbers(sample.rollout_log_probs, responseLength, 0),
  ];
  const versions = Array.isArray(sample.full_versions) ? stringArray(sample.full_versions) : null;
  const reason = stringOrNull(sample.segment_reason);
  const metadata = objectOrEmpty(sample.metadata);
  return {
    view: 'sample',
    index: numberOrNull(sample.segment_index) ?? 0,
    tokens,
    lossMask,
    logprobs,
    versions: versions !== null && versions.length === tokens.length ? versions : null,
    messages: Array.isArray(sample.messages) ? sample.messages : [],
    reason,
    reasons: reason === null ? [] : [reason],
    finishReason: stringOrNull(metadata.finish_reason),
    extraInfo: metadata,
  };
}

const statusRank: Record<string, number> = { aborted: 4, failed: 3, truncated: 2, completed: 1 };

/** Groups exported samples into sessions by session id (else trajectory id). */
export function sessionsFromSamples(samples: readonly SampleLine[]): InspectedSession[] {
  const sessions = new Map<string, InspectedSession>();
  for (const [position, sample] of samples.entries()) {
    const sessionId = stringOrNull(sample.session_id);
    const trajectoryId = stringOrNull(sample.trajectory_id);
    const step = numberOrNull(sample.step);
    const id =
      sessionId ?? trajectoryId ?? `step-${step ?? 0}-sample-${numberOrNull(sample.index) ?? position}`;
    const status = stringOrNull(sample.status) ?? 'completed';
    let session = sessions.get(id);
    if (session === undefined) {
      session = {
        id,
        sessionId,
        instanceId: stringOrNull(sample.instance_id),
        trajectoryId,
        reward: numberOrNull(sample.reward),
        status,
        removed: sample.remove_sample === true,
        step,
        segments: [],
        metadata: objectOrEmpty(sample.metadata),
      };
      sessions.set(id, session);
    } else {
      session.reward ??= numberOrNull(sample.reward);
      session.removed &&= sample.remove_sample === true;
      if ((statusRank[status] ?? 0) > (statusRank[session.status] ?? 0)) session.status = status;
    }
    session.segments.push(segmentFromSample(sample));
  }
  return [...sessions.values()];
}

function readJson(path: string): unknown {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return null;
  }
}

/** Reads `errors.jsonl` (one failure per line); a torn last line of a killed run is skipped. */
function readErrors(path: string): RunErrorLine[] {
  const errors: RunErrorLine[] = [];
  if (!existsSync(path)) return errors;
  forEachLine(path, (line) => {
    try {
      const error: unknown = JSON.parse(line);
      errors.push(isJsonObject(error) ? error : {});
    } catch {
      // Each record is one append: only the last line can be torn.
    }
  });
  return errors;
}

/**
 * Reads a training run's output directory: `samples/step-NNNNNN.jsonl` (every trained sample),
 * `errors.jsonl` (every failed attempt), plus `run-state.json` and the last line of
 * `metrics.jsonl` for the header.
 */
export function loadRunDirectory(directory: string): InspectorSource {
  const samplesDirectory = join(directory, 'samples');
  if (!existsSync(samplesDirectory)) {
    throw new DressageError({
      code: 'not_found',
      message: `${directory} has no samples/ folder (is it a dressage run directory?)`,
      details: { path: directory },
    });
  }
  const files = readdirSync(samplesDirectory)
    .filter((name) => /^step-\d+\.jsonl$/.test(name))
    .sort();
  const samples: SampleLine[] = [];
  for (const name of files)
    forEachLine(join(samplesDirectory, name), (line) => {
      const sample: unknown = JSON.parse(line);
      if (isJsonObject(sample)) samples.push(sample);
    });
  const sessions = sessionsFromSamples(samples);
  const byId = new Map(sessions.map((session) => [session.id, session]));
  let lastMetrics: unknown = null;
  let metricLines = 0;
  const metricsPath = join(directory, 'metrics.jsonl');
  if (existsSync(metricsPath)) {
    forEachLine(metricsPath, (line) => {
      metricLines += 1;
      lastMetrics = line;
    });
    lastMetrics = typeof lastMetrics === 'string' ? JSON.parse(lastMetrics) : null;
  }
  const errors = readErrors(join(directory, 'errors.jsonl'));
  return {
    kind: 'run',
    path: directory,
    summaries: sessions.map(summarizeSession),
    errors,
    details: {
      errors: errors.length,
      stepFiles: files.length,
      samples: samples.length,
      runState: readJson(join(directory, 'run-state.json')),
      metricLines,
      lastMetrics,
    },
    load: (id) => byId.get(id),
  };
}
