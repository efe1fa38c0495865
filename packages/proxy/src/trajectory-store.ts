import { closeSync, openSync, readSync } from 'node:fs';
import { type FileHandle, mkdir, open, rename, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { DressageError, packTypedArray, unpackTypedArray } from '@dressage/protocol';
import { expandVersionRuns, type RoutingRows, type VersionRun } from './token-buffer.js';

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
export interface StoredRecord {
  view: 'lineage' | 'timeline';
  segmentIndex: number;
  /** Every segment field except the token arrays and `aligned_response_length`. */
  meta: Record<string, unknown>;
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
  records: StoredRecord[];
  /** Null while evicted to disk. */
  blocks: StoredBlock[] | null;
}

interface Entry {
  trajectory: StoredTrajectory;
  offset: number;
  byteLength: number;
  residentBytes: number;
}

/** Options of {@link TrajectoryStore.open}. */
export interface TrajectoryStoreOptions {
  /** Directory of the append-only log; null keeps everything in memory only. */
  directory: string | null;
  /** Resident token bytes before persisted trajectories are evicted from memory. */
  memoryLimitBytes?: number;
}

const logName = 'trajectories.jsonl';

function blockBytes(blocks: readonly StoredBlock[]): number {
  let bytes = 0;
  for (const block of blocks)
    bytes +=
      block.ids.byteLength +
      block.logprobs.byteLength +
      block.maskRanges.byteLength +
      (block.routing?.data.byteLength ?? 0);
  return bytes;
}

function toBase64(array: Int32Array | Float32Array | Uint32Array | Uint16Array | Uint8Array): string {
  return Buffer.from(packTypedArray(array)).toString('base64');
}

function serialize(trajectory: StoredTrajectory): string {
  return `${JSON.stringify({
    op: 'put',
    trajectory: {
      trajectory_id: trajectory.trajectoryId,
      session_id: trajectory.sessionId,
      instance_id: trajectory.instanceId,
      finalized_at: trajectory.finalizedAt,
      record_versions: trajectory.recordVersions,
      records: trajectory.records.map((record) => ({
        view: record.view,
        segment_index: record.segmentIndex,
        meta: record.meta,
        block: record.block,
        end: record.end,
        response_start: record.responseStart,
      })),
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
  })}\n`;
}

interface SerializedTrajectory {
  trajectory_id: string;
  session_id: string;
  instance_id: string;
  finalized_at: number;
  record_versions: boolean;
  records: Array<{
    view: 'lineage' | 'timeline';
    segment_index: number;
    meta: Record<string, unknown>;
    block: number;
    end: number;
    response_start: number | null;
  }>;
  blocks: Array<{
    ids: string;
    logprobs: string;
    mask_ranges: string;
    versions: Array<[number, string]>;
    routing?: { dtype: RoutingRows['dtype']; width: number; rows: number; data: string };
  }>;
}

function deserializeBlocks(value: SerializedTrajectory): StoredBlock[] {
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

function deserialize(value: SerializedTrajectory, withBlocks: boolean): StoredTrajectory {
  return {
    trajectoryId: value.trajectory_id,
    sessionId: value.session_id,
    instanceId: value.instance_id,
    finalizedAt: value.finalized_at,
    recordVersions: value.record_versions,
    records: value.records.map((record) => ({
      view: record.view,
      segmentIndex: record.segment_index,
      meta: record.meta,
      block: record.block,
      end: record.end,
      responseStart: record.response_start,
    })),
    blocks: withBlocks ? deserializeBlocks(value) : null,
  };
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

/** Materialises a record as the `/trajectory/read` segment JSON. */
export function recordToSegment(
  record: StoredRecord,
  block: StoredBlock,
  recordVersions: boolean,
): Record<string, unknown> {
  const length = record.end;
  const tokens = new Array<number>(length);
  const logprobs = new Array<number>(length);
  const mask = new Array<number>(length).fill(0);
  for (let index = 0; index < length; index++) tokens[index] = block.ids[index]!;
  let aligned = 0;
  const ranges =
    record.responseStart === null ? block.maskRanges : Uint32Array.of(record.responseStart, record.end);
  for (let index = 0; index < length; index++) logprobs[index] = 0;
  for (let range = 0; range < ranges.length; range += 2) {
    const start = ranges[range]!;
    const end = Math.min(ranges[range + 1]!, length);
    for (let index = start; index < end; index++) {
      mask[index] = 1;
      aligned += 1;
    }
  }
  // Logprobs cover every model-output token (masked-out stale versions keep theirs).
  const logprobStart = record.responseStart ?? 0;
  for (let index = logprobStart; index < length; index++)
    logprobs[index] = float32ToNumber(block.logprobs[index]!);
  const segment: Record<string, unknown> = {
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

/** Statistics of `/trajectory/stats`. */
export interface StoreStats {
  total_items: number;
  total_instances: number;
  ready_instances: number;
}

/**
 * Finalized trajectories waiting to be read. Token data lives in typed arrays; with a directory,
 * every trajectory is appended to a JSONL log before it is acknowledged, drops are appended as
 * tombstones, and a restart replays the log. Over the memory limit, persisted trajectories are
 * evicted from memory and read back from the log on demand.
 */
export class TrajectoryStore {
  readonly directory: string | null;
  readonly #entries = new Map<string, Entry>();
  readonly #memoryLimit: number;
  #file: FileHandle | null = null;
  #size = 0;
  #writes: Promise<unknown> = Promise.resolve();
  #residentBytes = 0;

  private constructor(directory: string | null, memoryLimit: number) {
    this.directory = directory;
    this.#memoryLimit = memoryLimit;
  }

  /** Opens (and replays) the store. */
  static async open(options: TrajectoryStoreOptions): Promise<TrajectoryStore> {
    const store = new TrajectoryStore(
      options.directory,
      options.memoryLimitBytes ?? Number.POSITIVE_INFINITY,
    );
    if (options.directory !== null) await store.#replay(options.directory);
    return store;
  }

  /** Resident bytes of token data. */
  get residentBytes(): number {
    return this.#residentBytes;
  }

  /** Number of stored trajectories. */
  get size(): number {
    return this.#entries.size;
  }

  /** True when a trajectory with this id is stored. */
  has(trajectoryId: string): boolean {
    return this.#entries.has(trajectoryId);
  }

  /** Persists (when a directory is set) and indexes a trajectory. */
  async put(trajectory: StoredTrajectory): Promise<void> {
    let offset = -1;
    let byteLength = 0;
    if (this.#file !== null) {
      const line = Buffer.from(serialize(trajectory));
      ({ offset, byteLength } = await this.#append(line));
    }
    const residentBytes = blockBytes(trajectory.blocks ?? []);
    const previous = this.#entries.get(trajectory.trajectoryId);
    if (previous) this.#residentBytes -= previous.residentBytes;
    this.#entries.set(trajectory.trajectoryId, { trajectory, offset, byteLength, residentBytes });
    this.#residentBytes += residentBytes;
    this.#evictIfNeeded();
  }

  /** Segment JSON of one trajectory, sorted by segment index. */
  async read(
    trajectoryId: string,
    options: { instanceId?: string | null; view?: 'lineage' | 'timeline' | null; drain?: boolean },
  ): Promise<{ data: Record<string, unknown>[]; drained: boolean }> {
    const entry = this.#entries.get(trajectoryId);
    if (!entry || (options.instanceId && entry.trajectory.instanceId !== options.instanceId)) {
      return { data: [], drained: false };
    }
    const data = this.#segments(entry, options.view ?? null);
    let drained = false;
    if (options.drain) {
      await this.#drop(trajectoryId);
      drained = true;
    }
    return { data, drained };
  }

  /**
   * Batch mode: pops every instance group with at least `minGroupSize` distinct trajectories, or
   * older than `groupTimeoutMs`, oldest first, at most `maxGroups`.
   */
  async readBatch(options: {
    minGroupSize: number;
    groupTimeoutMs: number;
    maxGroups?: number | null;
  }): Promise<Record<string, unknown>[][]> {
    const groups = this.#readyGroups(options.minGroupSize, options.groupTimeoutMs);
    const selected = options.maxGroups ? groups.slice(0, options.maxGroups) : groups;
    const out: Record<string, unknown>[][] = [];
    for (const group of selected) {
      const segments: Record<string, unknown>[] = [];
      for (const entry of group) segments.push(...this.#segments(entry, null));
      for (const entry of group) await this.#drop(entry.trajectory.trajectoryId);
      out.push(segments);
    }
    return out;
  }

  /** Drops a trajectory; returns how many segment records it held. */
  async discard(trajectoryId: string): Promise<number> {
    const entry = this.#entries.get(trajectoryId);
    if (!entry) return 0;
    await this.#drop(trajectoryId);
    return entry.trajectory.records.length;
  }

  /** `/trajectory/stats`. */
  stats(minGroupSize = 1, groupTimeoutMs = Number.POSITIVE_INFINITY): StoreStats {
    let items = 0;
    const instances = new Set<string>();
    for (const entry of this.#entries.values()) {
      items += entry.trajectory.records.length;
      instances.add(entry.trajectory.instanceId);
    }
    return {
      total_items: items,
      total_instances: instances.size,
      ready_instances: this.#readyGroups(minGroupSize, groupTimeoutMs).length,
    };
  }

  /** Waits for pending writes and closes the log. */
  async close(): Promise<void> {
    await this.#writes;
    await this.#file?.close();
    this.#file = null;
  }

  #readyGroups(minGroupSize: number, groupTimeoutMs: number): Entry[][] {
    const byInstance = new Map<string, Entry[]>();
    for (const entry of this.#entries.values()) {
      const list = byInstance.get(entry.trajectory.instanceId);
      if (list) list.push(entry);
      else byInstance.set(entry.trajectory.instanceId, [entry]);
    }
    const now = Date.now();
    const ready: Entry[][] = [];
    for (const group of byInstance.values()) {
      const oldest = Math.min(...group.map((entry) => entry.trajectory.finalizedAt));
      if (group.length >= minGroupSize || now - oldest >= groupTimeoutMs) ready.push(group);
    }
    ready.sort(
      (left, right) =>
        Math.min(...left.map((entry) => entry.trajectory.finalizedAt)) -
        Math.min(...right.map((entry) => entry.trajectory.finalizedAt)),
    );
    return ready;
  }

  #segments(entry: Entry, view: 'lineage' | 'timeline' | null): Record<string, unknown>[] {
    const { trajectory } = entry;
    const chosen =
      view ?? (trajectory.records.some((record) => record.view === 'lineage') ? 'lineage' : 'timeline');
    const blocks = trajectory.blocks ?? this.#loadBlocks(entry);
    return trajectory.records
      .filter((record) => record.view === chosen)
      .sort((left, right) => left.segmentIndex - right.segmentIndex)
      .map((record) => recordToSegment(record, blocks[record.block]!, trajectory.recordVersions));
  }

  #loadBlocks(entry: Entry): StoredBlock[] {
    if (this.directory === null || entry.offset < 0) {
      throw new DressageError({
        code: 'data_loss',
        message: `Trajectory ${entry.trajectory.trajectoryId} has no token data`,
      });
    }
    const buffer = Buffer.alloc(entry.byteLength);
    const descriptor = openSync(join(this.directory, logName), 'r');
    try {
      readSync(descriptor, buffer, 0, entry.byteLength, entry.offset);
    } finally {
      closeSync(descriptor);
    }
    const parsed = JSON.parse(buffer.toString('utf8')) as { trajectory: SerializedTrajectory };
    return deserializeBlocks(parsed.trajectory);
  }

  #evictIfNeeded(): void {
    if (this.#residentBytes <= this.#memoryLimit || this.#file === null) return;
    const oldest = [...this.#entries.values()].sort(
      (left, right) => left.trajectory.finalizedAt - right.trajectory.finalizedAt,
    );
    for (const entry of oldest) {
      if (this.#residentBytes <= this.#memoryLimit) break;
      if (entry.trajectory.blocks === null || entry.offset < 0) continue;
      entry.trajectory.blocks = null;
      this.#residentBytes -= entry.residentBytes;
      entry.residentBytes = 0;
    }
  }

  async #drop(trajectoryId: string): Promise<void> {
    const entry = this.#entries.get(trajectoryId);
    if (!entry) return;
    this.#entries.delete(trajectoryId);
    this.#residentBytes -= entry.residentBytes;
    if (this.#file === null) return;
    if (this.#entries.size === 0) {
      // Nothing left to recover: start the log afresh instead of growing it forever.
      await this.#enqueue(async () => {
        await this.#file!.truncate(0);
        this.#size = 0;
      });
      return;
    }
    await this.#append(Buffer.from(`${JSON.stringify({ op: 'drop', trajectory_id: trajectoryId })}\n`));
  }

  #enqueue<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#writes.then(task, task);
    this.#writes = run.catch(() => undefined);
    return run;
  }

  #append(line: Buffer): Promise<{ offset: number; byteLength: number }> {
    return this.#enqueue(async () => {
      const offset = this.#size;
      await this.#file!.write(line, 0, line.length, offset);
      this.#size += line.length;
      return { offset, byteLength: line.length };
    });
  }

  async #replay(directory: string): Promise<void> {
    await mkdir(directory, { recursive: true });
    const path = join(directory, logName);
    let fileSize = 0;
    try {
      fileSize = (await stat(path)).size;
    } catch {
      fileSize = 0;
    }
    let dead = 0;
    const puts = new Map<string, { offset: number; byteLength: number }>();
    if (fileSize > 0) {
      const descriptor = openSync(path, 'r');
      try {
        forEachLine(descriptor, fileSize, (offset, line) => {
          let parsed: { op?: string; trajectory?: SerializedTrajectory; trajectory_id?: string };
          try {
            parsed = JSON.parse(line.toString('utf8'));
          } catch {
            dead += 1; // A torn last line from a crash: the trajectory was never acknowledged.
            return;
          }
          if (parsed.op === 'put' && parsed.trajectory) {
            if (puts.has(parsed.trajectory.trajectory_id)) dead += 1;
            puts.set(parsed.trajectory.trajectory_id, { offset, byteLength: line.length + 1 });
            this.#entries.delete(parsed.trajectory.trajectory_id);
            const trajectory = deserialize(parsed.trajectory, true);
            const residentBytes = blockBytes(trajectory.blocks ?? []);
            this.#entries.set(trajectory.trajectoryId, {
              trajectory,
              offset,
              byteLength: line.length + 1,
              residentBytes,
            });
          } else if (parsed.op === 'drop' && parsed.trajectory_id) {
            dead += 2;
            puts.delete(parsed.trajectory_id);
            this.#entries.delete(parsed.trajectory_id);
          }
        });
      } finally {
        closeSync(descriptor);
      }
    }
    if (dead > 0) {
      // Compact: copy the live lines into a fresh log, then swap it in atomically.
      const temporary = `${path}.compact`;
      const source = openSync(path, 'r');
      const target = await open(temporary, 'w');
      let size = 0;
      try {
        for (const entry of this.#entries.values()) {
          const buffer = Buffer.alloc(entry.byteLength);
          readSync(source, buffer, 0, entry.byteLength, entry.offset);
          await target.write(buffer, 0, buffer.length, size);
          entry.offset = size;
          size += buffer.length;
        }
        await target.sync();
      } finally {
        closeSync(source);
        await target.close();
      }
      await rename(temporary, path);
      fileSize = size;
    }
    this.#file = await open(path, 'a+');
    this.#size = fileSize;
    this.#residentBytes = 0;
    for (const entry of this.#entries.values()) this.#residentBytes += entry.residentBytes;
    this.#evictIfNeeded();
  }
}

// Reads a file in large chunks and calls back with each complete line and its byte offset.
function forEachLine(descriptor: number, size: number, onLine: (offset: number, line: Buffer) => void): void {
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
      onLine(carryOffset + start, data.subarray(start, newline));
      start = newline + 1;
    }
    carryOffset += start;
    data = data.subarray(start);
    carry = Buffer.from(data);
  }
  if (carry.length > 0) onLine(carryOffset, carry);
}
