import type { InspectedSession, SessionSummary } from '../model.js';

/** Where the sessions come from: a run directory, exported segment files, or a proxy store. */
export type SourceKind = 'run' | 'file' | 'store';

/** Sessions indexed once at load; a session's token data is loaded on demand. */
export interface InspectorSource {
  kind: SourceKind;
  path: string;
  /** One row per session, in load order. */
  summaries: SessionSummary[];
  /** Facts about the source shown in the header (run state, last metrics, files read). */
  details: Record<string, unknown>;
  load(id: string): InspectedSession | undefined;
  /**
   * The run's recorded failures (`errors.jsonl`: stage, where, sample, session, code, message), in
   * order; absent for sources without one.
   */
  errors?: readonly RunErrorLine[];
}

/**
 * One line of a run's `errors.jsonl` as read (the trainer's `RunErrorRecord`): the inspector filters
 * on `session_id` and shows every field as it is, so none is checked.
 */
export interface RunErrorLine {
  time?: unknown;
  step?: unknown;
  stage?: unknown;
  where?: unknown;
  sample_index?: unknown;
  group_index?: unknown;
  instance_id?: unknown;
  session_id?: unknown;
  retry?: unknown;
  code?: unknown;
  message?: unknown;
  trained?: unknown;
}

/** Whether a parsed JSON value is an object (not null, not an array). */
export function isJsonObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Reads a field as a string, else null. */
export function stringOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

/** Reads a field as a finite number, else null. */
export function numberOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** Reads a field as a plain object, else an empty one. */
export function objectOrEmpty(value: unknown): Record<string, unknown> {
  // Free-form metadata and extra info: every key is shown as it is.
  return isJsonObject(value) ? (value as Record<string, unknown>) : {};
}

/** Reads a field as an array of strings. */
export function stringArray(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : [];
}

/** An array of numbers exactly `length` long: pads with `fill` or cuts. */
export function fitNumbers(value: unknown, length: number, fill: number): number[] {
  const source = Array.isArray(value) ? value : [];
  const out = new Array<number>(length);
  for (let index = 0; index < length; index++) {
    const item = source[index];
    out[index] = typeof item === 'number' ? item : fill;
  }
  return out;
}
