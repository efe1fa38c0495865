import { readSync } from 'node:fs';
import { type SegmentMeta, segmentExtraInfoSchema } from '@dressage/protocol';
import { packTypedArray, unpackTypedArray } from '@dressage/protocol/internal';
import { z } from 'zod';
import type { StoredBlock, StoredTrajectory } from './store-records.js';
import type { RoutingRows } from './token-buffer.js';

// The line codec of the trajectory log: one trajectory (or a tombstone) per JSON line, token arrays
// as base64 of their little-endian bytes, each distinct message written once per line; and reading
// a log line by line, naming what is wrong with a damaged line.

export function toBase64(array: Int32Array | Float32Array | Uint32Array | Uint16Array | Uint8Array): string {
  return Buffer.from(packTypedArray(array)).toString('base64');
}

// The records of a trajectory repeat its messages (each timeline record carries its step's whole
// list), so written out in full a line grows with the square of the turns: 10 MiB for 75 turns of
// 68K tokens, against 0.7 MiB of token arrays. A line lists each distinct message object once, and
// its records name them by index.
export function serialize(trajectory: StoredTrajectory): string {
  const messages: unknown[] = [];
  const messageIndex = new Map<unknown, number>();
  const indexOf = (message: unknown): number => {
    let index = messageIndex.get(message);
    if (index === undefined) {
      index = messages.length;
      messages.push(message);
      messageIndex.set(message, index);
    }
    return index;
  };
  const records = trajectory.records.map((record) => {
    const list = record.meta.messages as unknown;
    const shared = Array.isArray(list);
    return {
      view: record.view,
      segment_index: record.segmentIndex,
      // `messages` keeps its place among the fields (null here), so a read gives the same order.
      meta: shared ? { ...record.meta, messages: null } : record.meta,
      ...(shared ? { message_refs: list.map(indexOf) } : {}),
      block: record.block,
      end: record.end,
      response_start: record.responseStart,
    };
  });
  const line: StoreLine = {
    op: 'put',
    trajectory: {
      trajectory_id: trajectory.trajectoryId,
      session_id: trajectory.sessionId,
      instance_id: trajectory.instanceId,
      finalized_at: trajectory.finalizedAt,
      record_versions: trajectory.recordVersions,
      messages,
      records,
      blocks: (trajectory.blocks ?? []).map((block) => ({
        ids: toBase64(block.ids),
        logprobs: toBase64(block.logprobs),
        mask_ranges: toBase64(block.maskRanges),
        versions: block.versionRuns.map((run) => [run.end, run.version]),
        ...(block.routing
          ? {
              routing: {
                dtype: block.routing.dtype,
                width: block.routing.width,
                rows: block.routing.rows,
                data: toBase64(block.routing.data),
              },
            }
          : {}),
      })),
    },
  };
  return `${JSON.stringify(line)}\n`;
}

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
const storeLineSchema = z.discriminatedUnion('op', [
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

export type StoreLine = z.infer<typeof storeLineSchema>;
export type SerializedTrajectory = Extract<StoreLine, { op: 'put' }>['trajectory'];

/** Why a log line is not a record, or null when it is one. */
export function lineProblem(text: string): { problem: string } | { line: StoreLine } {
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

export function deserializeBlocks(value: SerializedTrajectory): StoredBlock[] {
  return value.blocks.map((block) => ({
    ids: unpackTypedArray(Buffer.from(block.ids, 'base64'), 'int32', { field: 'ids' }) as Int32Array,
    logprobs: unpackTypedArray(Buffer.from(block.logprobs, 'base64'), 'float32', {
      field: 'logprobs',
    }) as Float32Array,
    maskRanges: unpackTypedArray(Buffer.from(block.mask_ranges, 'base64'), 'uint32', {
      field: 'mask_ranges',
    }) as Uint32Array,
    versionRuns: block.versions.map(([end, version]) => ({ end, version })),
    ...(block.routing
      ? {
          routing: {
            dtype: block.routing.dtype,
            width: block.routing.width,
            rows: block.routing.rows,
            data: unpackTypedArray(Buffer.from(block.routing.data, 'base64'), block.routing.dtype, {
              field: 'routing',
            }) as RoutingRows['data'],
          },
        }
      : {}),
  }));
}

export function deserialize(value: SerializedTrajectory, withBlocks: boolean): StoredTrajectory {
  return {
    trajectoryId: value.trajectory_id,
    sessionId: value.session_id,
    instanceId: value.instance_id,
    finalizedAt: value.finalized_at,
    recordVersions: value.record_versions,
    records: value.records.map((record) => ({
      view: record.view,
      segmentIndex: record.segment_index,
      // Records share the message objects again, as they did before they were written.
      meta:
        record.message_refs === undefined
          ? (record.meta as unknown as SegmentMeta)
          : ({
              ...record.meta,
              messages: record.message_refs.map((index) => value.messages?.[index]),
            } as unknown as SegmentMeta),
      block: record.block,
      end: record.end,
      responseStart: record.response_start,
    })),
    blocks: withBlocks ? deserializeBlocks(value) : null,
  };
}

// Reads a file in large chunks and calls back with each line, its byte offset and whether it ends
// with a newline (only the last one can lack it).
export function forEachLine(
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
