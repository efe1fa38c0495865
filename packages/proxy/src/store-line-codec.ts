import type { SegmentMeta } from '@dressage/protocol';
import {
  packTypedArray,
  type SerializedTrajectory,
  type StoreLine,
  unpackTypedArray,
} from '@dressage/protocol/internal';
import type { StoredBlock, StoredTrajectory } from './store-records.js';
import type { RoutingRows } from './token-buffer.js';

// Between the store's trajectories and the lines of its log (the protocol's `storeLineSchema`):
// token arrays as base64 of their little-endian bytes, each distinct message written once per line.

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
