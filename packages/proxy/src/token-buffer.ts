import { CONTEXT_TOKEN_VERSION } from '@dressage/protocol';

/** A run of token versions: tokens before `end` (and after the previous run) carry `version`. */
export interface VersionRun {
  end: number;
  version: string;
}

/**
 * Growable token storage of one lineage segment (or one snapshot step): ids and logprobs in typed
 * arrays, response ranges and versions as runs. No per-token objects.
 */
export class TokenBuffer {
  ids: Int32Array;
  logprobs: Float32Array;
  length = 0;
  /** Flat `[start, end, start, end, …]` of model-output ranges (loss mask 1). */
  readonly responseRanges: number[] = [];
  readonly versionRuns: VersionRun[] = [];

  constructor(capacity = 256) {
    this.ids = new Int32Array(capacity);
    this.logprobs = new Float32Array(capacity);
  }

  #reserve(extra: number): void {
    const needed = this.length + extra;
    if (needed <= this.ids.length) return;
    let capacity = this.ids.length * 2;
    while (capacity < needed) capacity *= 2;
    const ids = new Int32Array(capacity);
    ids.set(this.ids.subarray(0, this.length));
    const logprobs = new Float32Array(capacity);
    logprobs.set(this.logprobs.subarray(0, this.length));
    this.ids = ids;
    this.logprobs = logprobs;
  }

  #pushVersion(end: number, version: string): void {
    const last = this.versionRuns.at(-1);
    if (last && last.version === version) last.end = end;
    else this.versionRuns.push({ end, version });
  }

  /** Appends context ids (mask 0, logprob 0, version `"-1"`). */
  appendContext(ids: ArrayLike<number>): void {
    if (ids.length === 0) return;
    this.#reserve(ids.length);
    this.ids.set(ids, this.length);
    this.logprobs.fill(0, this.length, this.length + ids.length);
    this.length += ids.length;
    this.#pushVersion(this.length, CONTEXT_TOKEN_VERSION);
  }

  /** Appends model output with its logprobs and per-token version runs (relative to the output). */
  appendResponse(ids: Int32Array, logprobs: Float32Array, runs: readonly VersionRun[]): void {
    if (ids.length === 0) return;
    const start = this.length;
    this.#reserve(ids.length);
    this.ids.set(ids, start);
    this.logprobs.set(logprobs.subarray(0, ids.length), start);
    this.length += ids.length;
    const lastRange = this.responseRanges.length;
    if (lastRange > 0 && this.responseRanges[lastRange - 1] === start)
      this.responseRanges[lastRange - 1] = this.length;
    else this.responseRanges.push(start, this.length);
    for (const run of runs) this.#pushVersion(start + run.end, run.version);
  }

  /** A copy of the ids in `[start, end)`. */
  slice(start: number, end: number): Int32Array {
    return this.ids.slice(start, end);
  }

  /** The version runs restricted to `[start, end)`, relative to `start`. */
  versionRunsIn(start: number, end: number): VersionRun[] {
    const out: VersionRun[] = [];
    let runStart = 0;
    for (const run of this.versionRuns) {
      const from = Math.max(runStart, start);
      const to = Math.min(run.end, end);
      if (to > from) out.push({ end: to - start, version: run.version });
      runStart = run.end;
      if (runStart >= end) break;
    }
    return out;
  }
}

/** Expands version runs to one string per token. */
export function expandVersionRuns(runs: readonly VersionRun[], length: number): string[] {
  const versions = new Array<string>(length);
  let start = 0;
  for (const run of runs) {
    versions.fill(run.version, start, Math.min(run.end, length));
    start = run.end;
  }
  if (start < length) versions.fill(CONTEXT_TOKEN_VERSION, start, length);
  return versions;
}
