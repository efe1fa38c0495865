import { createReadStream } from 'node:fs';
import { appendFile, mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { createInterface } from 'node:readline';

/** One line of the metrics log: a training step and its named figures. */
export interface MetricsRecord {
  step: number;
  /** Seconds since the run started. */
  time: number;
  /** Whether the step was warm-start (supervised) or RL. */
  phase: 'warm_start' | 'rl';
  metrics: Record<string, number>;
}

/**
 * Appends metrics as JSON lines. Each record is written with one append call, so a crash leaves a
 * file whose every complete line is a valid record.
 */
export class MetricsLog {
  #ready: Promise<void> | null = null;

  constructor(readonly path: string) {}

  /** Appends one record. */
  async append(record: MetricsRecord): Promise<void> {
    this.#ready ??= mkdir(dirname(this.path), { recursive: true }).then(() => undefined);
    await this.#ready;
    await appendFile(this.path, `${JSON.stringify(record)}\n`);
  }
}

/** Reads a metrics log, skipping a truncated last line (a run killed mid-write). */
export async function readMetricsLog(path: string): Promise<MetricsRecord[]> {
  const records: MetricsRecord[] = [];
  const lines = createInterface({
    input: createReadStream(path, 'utf8'),
    crlfDelay: Number.POSITIVE_INFINITY,
  });
  for await (const line of lines) {
    if (line.trim() === '') continue;
    try {
      records.push(JSON.parse(line) as MetricsRecord);
    } catch {
      // Only a torn final line can be unparsable; every earlier line was written whole.
    }
  }
  return records;
}
