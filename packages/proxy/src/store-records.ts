import type { Segment, SegmentMeta } from '@dressage/protocol';
import { toBase64 } from './store-line-codec.js';
import { expandVersionRuns, type RoutingRows, type VersionRun } from './token-buffer.js';

// What the trajectory store holds for each finalized trajectory, and how one of its records becomes
// the Segment `/trajectory/read` answers.

/** Token data of one frozen lineage segment or snapshot step. */
export interface StoredBlock {
  ids: Int32Array;
  logprobs: Float32Array;
  /** Flat `[start, end, …]` ranges of loss mask 1 (lineage view). */
  maskRanges: Uint32Array;
  versionRuns: VersionRun[];
  /** R3 routed-expert rows from position 0 (absent without R3 data). */
  routing?: RoutingRows;
}

/** One segment record: JSON fields plus a window into a block. */
export interface StoredTrajectoryRecord {
  view: 'lineage' | 'timeline';
  segmentIndex: number;
  /** Every segment field except the token arrays and `aligned_response_length`. */
  meta: SegmentMeta;
  block: number;
  /** Tokens `[0, end)` of the block. */
  end: number;
  /** Timeline records: the response starts here (mask 1 and logprobs on `[responseStart, end)`). */
  responseStart: number | null;
}

/** A finalized trajectory as the store keeps it. */
export interface StoredTrajectory {
  trajectoryId: string;
  sessionId: string;
  instanceId: string;
  finalizedAt: number;
  recordVersions: boolean;
  records: StoredTrajectoryRecord[];
  /** Null while evicted to disk. */
  blocks: StoredBlock[] | null;
}

// float32 logprobs print as the shortest decimal that maps back to the same float32 (-0.1, not
// -0.10000000149011612), which is also what the engine's own float32 value was.
function float32ToNumber(value: number): number {
  if (value === 0) return 0;
  for (let precision = 6; precision <= 9; precision++) {
    const candidate = Number(value.toPrecision(precision));
    if (Math.fround(candidate) === value) return candidate;
  }
  return value;
}

/**
 * Materialises a record as a {@link Segment}: the token data in typed arrays (float64 logprobs,
 * each the shortest decimal of the stored float32), as `/trajectory/read` writes it.
 */
export function recordToSegment(
  record: StoredTrajectoryRecord,
  block: StoredBlock,
  recordVersions: boolean,
): Segment {
  const length = record.end;
  const tokens = block.ids.slice(0, length);
  const logprobs = new Float64Array(length);
  const mask = new Uint8Array(length);
  let aligned = 0;
  const ranges =
    record.responseStart === null ? block.maskRanges : Uint32Array.of(record.responseStart, record.end);
  for (let range = 0; range < ranges.length; range += 2) {
    const start = ranges[range]!;
    const end = Math.min(ranges[range + 1]!, length);
    if (end > start) {
      mask.fill(1, start, end);
      aligned += end - start;
    }
  }
  // Logprobs cover every model-output token (masked-out stale versions keep theirs).
  const logprobStart = record.responseStart ?? 0;
  for (let index = logprobStart; index < length; index++)
    logprobs[index] = float32ToNumber(block.logprobs[index]!);
  const segment: Segment = {
    ...record.meta,
    tokens,
    full_logprobs: logprobs,
    full_loss_mask: mask,
    aligned_response_length: aligned,
  };
  if (recordVersions) {
    const versions = expandVersionRuns(block.versionRuns, length);
    if (record.responseStart !== null) versions.fill('-1', 0, record.responseStart);
    segment.full_versions = versions;
  }
  // R3: one chunk of `len(tokens) - 1` rows; a record whose rows are not all known gets none.
  const routing = block.routing;
  const rows = length - 1;
  if (routing && rows >= 0 && routing.rows >= rows) {
    segment.routed_experts_chunks = [
      {
        data: toBase64(routing.data.subarray(0, rows * routing.width)),
        row_count: rows,
        dtype: routing.dtype,
      },
    ];
  }
  return segment;
}
