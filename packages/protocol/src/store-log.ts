// The proxy's trajectory log (`trajectories.jsonl` in its store directory): one trajectory, or a
// tombstone, per JSON line, token arrays as base64 of their little-endian bytes. The proxy writes
// and replays it; the inspector reads it.
import { readSync } from 'node:fs';
import { z } from 'zod';
import { segmentExtraInfoSchema } from './schemas/segment.js';

/** The log file inside a proxy store directory. */
export const storeLogName = 'trajectories.jsonl';

const base64 = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, 'base64');
const count = z.int().nonnegative();

// A record's segment fields without its token arrays: the identity and bookkeeping a read hands
// out, checked as the segment schema checks them (other fields pass through as they were written).
const storedMetaSchema = z.looseObject({
  uid: z.string().min(1),
  session_id: z.string().min(1),
  trajectory_id: z.string().min(1),
  instance_id: z.string().min(1),
  turn_id: z.string().nullable(),
  segment_index: count,
  segment_count: z.int().positive(),
  tools: z.array(z.unknown()).nullable(),
  messages: z.array(z.unknown()).nullable(),
  finish_reason: z.string().nullable(),
  timestamp: z.number(),
  extra_info: segmentExtraInfoSchema,
});

/**
 * One line of the log. The writer's types come from it and replay checks every line against it: a
 * line that does not parse is damage, never a record to skip.
 */
export const storeLineSchema = z.discriminatedUnion('op', [
  z.object({
    op: z.literal('put'),
    trajectory: z.object({
      trajectory_id: z.string().min(1),
      session_id: z.string().min(1),
      instance_id: z.string().min(1),
      finalized_at: z.number(),
      record_versions: z.boolean(),
      /** Distinct messages of the records (absent in lines written before records shared them). */
      messages: z.array(z.unknown()).optional(),
      records: z.array(
        z.object({
          view: z.enum(['lineage', 'timeline']),
          segment_index: count,
          meta: storedMetaSchema,
          /** The record's `messages`, as indices into the line's `messages`. */
          message_refs: z.array(count).optional(),
          block: count,
          end: count,
          response_start: count.nullable(),
        }),
      ),
      blocks: z.array(
        z.object({
          ids: base64,
          logprobs: base64,
          mask_ranges: base64,
          versions: z.array(z.tuple([count, z.string()])),
          routing: z
            .object({
              dtype: z.enum(['int32', 'uint16', 'uint8']),
              width: count,
              rows: count,
              data: base64,
            })
            .optional(),
        }),
      ),
    }),
  }),
  z.object({ op: z.literal('drop'), trajectory_id: z.string().min(1) }),
]);

/** One line of the trajectory log. */
export type StoreLine = z.infer<typeof storeLineSchema>;
/** The trajectory of a `put` line. */
export type SerializedTrajectory = Extract<StoreLine, { op: 'put' }>['trajectory'];

/** Why a log line is not a record, or null when it is one. */
export function storeLineProblem(text: string): { problem: string } | { line: StoreLine } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { problem: 'not JSON (cut short or overwritten)' };
  }
  const result = storeLineSchema.safeParse(parsed);
  if (!result.success) {
    const [issue] = result.error.issues;
    return { problem: `not a record: ${issue?.path.join('.') || '(line)'}: ${issue?.message ?? 'invalid'}` };
  }
  // The line as written, not zod's copy: that one orders each object's fields as the schema does.
  const line = parsed as StoreLine;
  // Every record's window lies inside a block of the line.
  if (line.op === 'put') {
    const { records, blocks } = line.trajectory;
    for (const record of records)
      if (record.block >= blocks.length) return { problem: `not a record: block ${record.block} is missing` };
  }
  return { line };
}

/** The log's damaged lines: where they are and why. */
export interface DamagedLine {
  /** 1-based line number. */
  line: number;
  offset: number;
  problem: string;
}

/**
 * Reads a file in large chunks and calls back with each line, its byte offset and whether it ends
 * with a newline (only the last one can lack it).
 */
export function readLines(
  descriptor: number,
  size: number,
  onLine: (offset: number, line: Buffer, terminated: boolean) => void,
): void {
  const chunkSize = 16 * 1024 * 1024;
  let carry = Buffer.alloc(0);
  let carryOffset = 0;
  let position = 0;
  while (position < size) {
    const chunk = Buffer.alloc(Math.min(chunkSize, size - position));
    const read = readSync(descriptor, chunk, 0, chunk.length, position);
    if (read <= 0) break;
    position += read;
    let data = carry.length > 0 ? Buffer.concat([carry, chunk.subarray(0, read)]) : chunk.subarray(0, read);
    let start = 0;
    for (;;) {
      const newline = data.indexOf(10, start);
      if (newline === -1) break;
      onLine(carryOffset + start, data.subarray(start, newline), true);
      start = newline + 1;
    }
    carryOffset += start;
    data = data.subarray(start);
    carry = Buffer.from(data);
  }
  if (carry.length > 0) onLine(carryOffset, carry, false);
}
