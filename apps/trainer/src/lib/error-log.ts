import { existsSync } from 'node:fs';
import { appendFile, readFile } from 'node:fs/promises';
import { DressageError, type Sample, SampleStatus } from '@dressage/protocol';
import type { GenerateFunction, GenerateResult } from '@dressage/schedulers';

/**
 * One failure of a run, as `<output_dir>/errors.jsonl` holds it (one object per line): what failed
 * (`stage`, `where`), on which sample and session, with the error's code and message. A sample the
 * scheduler retries leaves one record per failed attempt.
 */
export interface RunErrorRecord {
  /** ISO time the failure was recorded. */
  time: string;
  /** The RL step in progress (0-based). */
  step: number;
  /** `generate`: the agent's rollout of a sample; `reward`: its reward function. */
  stage: 'generate' | 'reward';
  /** The component: `whitebox agent WeatherAgent`, `blackbox agent codex`, `reward function "x"`. */
  where: string;
  sample_index: number | null;
  group_index: number | null;
  instance_id: string | null;
  session_id: string | null;
  /** The attempt's retry count (`metadata.dressage_retry_count`, 0 for the first). */
  retry: number;
  /** A `DressageError` code, or the agent's own error kind (`context_overflow`, `max_steps_exceeded`...). */
  code: string;
  message: string;
  /** True when the sample still trains (a blackbox turn cut short whose partial trajectory is kept). */
  trained: boolean;
}

type SampleFields = Pick<
  RunErrorRecord,
  'sample_index' | 'group_index' | 'instance_id' | 'session_id' | 'retry'
>;

function stringOrNull(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

function sampleFields(sample: Sample): SampleFields {
  const retry = sample.metadata.dressage_retry_count;
  return {
    sample_index: sample.index,
    group_index: sample.group_index,
    instance_id: stringOrNull(sample.metadata.instance_id),
    // A no-gradient placeholder keeps its failed session as `last_failed_session_id`.
    session_id:
      stringOrNull(sample.metadata.session_id) ??
      stringOrNull(sample.session_id) ??
      stringOrNull(sample.metadata.last_failed_session_id),
    retry: typeof retry === 'number' ? retry : 0,
  };
}

/**
 * The failure a generate function left on a returned sample, or null: a whitebox run that threw
 * (`whitebox_error`), a blackbox run that failed or was cut short (`blackbox_agent_error_kind`).
 */
export function sampleFailure(sample: Sample): Pick<RunErrorRecord, 'code' | 'message' | 'trained'> | null {
  const metadata = sample.metadata;
  const aborted =
    sample.status === SampleStatus.ABORTED || sample.status === SampleStatus.FAILED || sample.remove_sample;
  if (typeof metadata.whitebox_error === 'string') {
    return {
      code: stringOrNull(metadata.whitebox_error_code) ?? 'aborted',
      message: metadata.whitebox_error,
      trained: !aborted,
    };
  }
  const kind = stringOrNull(metadata.blackbox_agent_error_kind);
  if (kind !== null) {
    const history = Array.isArray(metadata.blackbox_failure_history) ? metadata.blackbox_failure_history : [];
    const last = history.at(-1) as { reason?: unknown } | undefined;
    const details = metadata.blackbox_agent_error_details;
    const message =
      stringOrNull(last?.reason) ??
      `the agent's turn ended with ${kind}${details === undefined ? '' : `: ${JSON.stringify(details)}`}`;
    return { code: kind, message, trained: !aborted };
  }
  if (sample.status === SampleStatus.ABORTED || sample.status === SampleStatus.FAILED)
    return { code: 'aborted', message: 'the generate function returned an aborted sample', trained: false };
  return null;
}

/**
 * The run's error log, `<output_dir>/errors.jsonl`: appended as failures happen, so a run that dies
 * keeps what went wrong before it.
 */
export class ErrorLog {
  #pending: Promise<void> = Promise.resolve();
  /** Records written by this process. */
  count = 0;

  constructor(readonly path: string) {}

  /** Appends a record (writes are queued in order; a failed write is reported on the next {@link flush}). */
  append(record: RunErrorRecord): Promise<void> {
    this.count++;
    this.#pending = this.#pending.then(() => appendFile(this.path, `${JSON.stringify(record)}\n`));
    return this.#pending;
  }

  /** Waits for every queued write. */
  flush(): Promise<void> {
    return this.#pending;
  }

  /**
   * Wraps a generate function so that every failed attempt is recorded: one that throws (the error
   * is rethrown) and every returned sample that carries a failure.
   */
  wrapGenerate(generate: GenerateFunction, where: string, step: () => number): GenerateFunction {
    return async (sample, samplingParams, context) => {
      let result: GenerateResult;
      try {
        result = await generate(sample, samplingParams, context);
      } catch (error) {
        const reason = DressageError.from(error);
        await this.append({
          time: new Date().toISOString(),
          step: step(),
          stage: 'generate',
          where,
          ...sampleFields(sample),
          code: reason.code,
          message: reason.message,
          trained: false,
        });
        throw error;
      }
      const returned = result === null || result === undefined ? [] : [result].flat(2);
      // One record per trajectory: the segments of one session share the failure.
      const seen = new Set<string>();
      for (const item of returned as Sample[]) {
        const failure = sampleFailure(item);
        if (failure === null) continue;
        const fields = sampleFields(item);
        const key = fields.session_id ?? `${fields.sample_index}`;
        if (seen.has(key)) continue;
        seen.add(key);
        await this.append({
          time: new Date().toISOString(),
          step: step(),
          stage: 'generate',
          where,
          ...fields,
          ...failure,
        });
      }
      return result;
    };
  }

  /** Records a reward function's failure on a sample (the error is the dispatcher's). */
  recordRewardFailure(error: unknown, samples: readonly Sample[], step: number): Promise<void> {
    const reason = DressageError.from(error);
    const details = reason.details as { reward_fn?: unknown; sample_index?: unknown };
    const sample = samples.find((item) => item.index === details.sample_index);
    return this.append({
      time: new Date().toISOString(),
      step,
      stage: 'reward',
      where:
        typeof details.reward_fn === 'string' ? `reward function "${details.reward_fn}"` : 'reward functions',
      ...(sample === undefined
        ? { sample_index: null, group_index: null, instance_id: null, session_id: null, retry: 0 }
        : sampleFields(sample)),
      code: reason.code,
      message: reason.message,
      trained: false,
    });
  }
}

/** Reads `errors.jsonl`; an absent file is no errors, a torn last line (a killed run) is skipped. */
export async function readErrorLog(path: string): Promise<RunErrorRecord[]> {
  if (!existsSync(path)) return [];
  const records: RunErrorRecord[] = [];
  for (const line of (await readFile(path, 'utf8')).split('\n')) {
    if (line.trim() === '') continue;
    try {
      records.push(JSON.parse(line) as RunErrorRecord);
    } catch {
      // Only the last line can be torn: each record is one append.
    }
  }
  return records;
}
