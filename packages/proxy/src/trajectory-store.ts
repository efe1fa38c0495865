import { closeSync, constants, openSync, readSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DressageError, type Segment, type TrajectoryStats } from '@dressage/protocol';
import {
  type DamagedLine,
  readLines,
  type SerializedTrajectory,
  storeLineProblem,
  storeLogName,
} from '@dressage/protocol/internal';
import { ProxyHttpError } from './http-error.js';
import { deserialize, deserializeBlocks, serialize } from './store-line-codec.js';
import { lockStoreDirectory, type StoreLock } from './store-lock.js';
import { recordToSegment, type StoredBlock, type StoredTrajectory } from './store-records.js';

interface Entry {
  trajectory: StoredTrajectory;
  offset: number;
  byteLength: number;
  residentBytes: number;
}

/**
 * When the log is flushed to stable storage. `always`: every finalized trajectory is on disk (fdatasync,
 * shared by the puts that land together) before finalize answers, so it survives power loss.
 * `never`: it is in the kernel's page cache before finalize answers, so it survives the proxy
 * crashing or being killed, but power loss or a kernel crash can take the last seconds of it.
 */
export type StoreFsyncPolicy = 'always' | 'never';

/** The file operations the store needs of its log (a `FileHandle` has them). */
export interface StoreLogFile {
  write(
    buffer: Uint8Array,
    offset: number,
    length: number,
    position: number,
  ): Promise<{ bytesWritten: number }>;
  truncate(length: number): Promise<void>;
  datasync(): Promise<void>;
  close(): Promise<void>;
}

/** Options of {@link TrajectoryStore.open}. */
export interface TrajectoryStoreOptions {
  /** Directory of the append-only log; null keeps everything in memory only. */
  directory: string | null;
  /** Resident token bytes before persisted trajectories are evicted from memory. */
  memoryLimitBytes?: number;
  /** When puts are flushed to stable storage (default `always`). */
  fsync?: StoreFsyncPolicy;
  /** Opens the log for reading and writing; tests inject short writes and full disks here. */
  openLog?: (path: string) => Promise<StoreLogFile>;
  /**
   * The run this store records for. A store another run wrote (and still holding trajectories) is
   * refused unless `adopt`; null continues the store's own run, or starts a new one.
   */
  runId?: string | null;
  /** Take over the trajectories of a store another run wrote. Default false. */
  adopt?: boolean;
}

/** What {@link TrajectoryStore.open} found in its directory. */
export interface StoreRecovery {
  /** The run the store records for now. */
  runId: string;
  /** The run that wrote the store before, when this run adopted it. */
  adoptedFrom: string | null;
  /** Trajectories replayed from the log. */
  trajectories: number;
  /** When the oldest and newest of them were finalized (ms since the epoch); null when none. */
  oldestFinalizedAt: number | null;
  newestFinalizedAt: number | null;
  /** What the replay had to say (a dropped torn last line, for one). */
  notes: string[];
}

function openLogFile(path: string): Promise<StoreLogFile> {
  // Positional writes: `a`/`a+` (O_APPEND) would ignore the position a repaired tail is rewritten at.
  return open(path, constants.O_RDWR | constants.O_CREAT, 0o644);
}

// A write that did not fully land: 507 when the disk (or quota) is full, 503 for other I/O errors.
function storageError(error: unknown, what: string): ProxyHttpError {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  const full = code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG';
  const message = `${what} did not reach the trajectory log (${code ?? (error as Error)?.message ?? error}); nothing was recorded, retry once the store has room`;
  return new ProxyHttpError({
    status: full ? 507 : 503,
    body: { detail: { error: full ? 'insufficient_storage' : 'store_unavailable', message } },
    message,
    cause: error,
  });
}

const logName = storeLogName;
const runName = 'RUN.json';
const quarantineName = 'trajectories.quarantine.jsonl';

async function readRunId(directory: string): Promise<string | null> {
  try {
    const run = JSON.parse(await readFile(join(directory, runName), 'utf8')) as { run_id?: unknown };
    return typeof run.run_id === 'string' ? run.run_id : null;
  } catch {
    return null;
  }
}

async function writeRunId(directory: string, runId: string, adoptedFrom: string | null): Promise<void> {
  const path = join(directory, runName);
  const record = { run_id: runId, since: new Date().toISOString(), adopted_from: adoptedFrom };
  await writeFile(`${path}.tmp`, `${JSON.stringify(record)}\n`);
  await rename(`${path}.tmp`, path);
  await syncDirectory(directory);
}

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

/** Statistics of `/trajectory/stats`. */
export type StoreStats = TrajectoryStats;

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
  readonly #fsync: StoreFsyncPolicy;
  readonly #openLog: (path: string) => Promise<StoreLogFile>;
  #file: StoreLogFile | null = null;
  /** Bytes of whole lines in the log: the next line is written here. */
  #size = 0;
  /** A failed write left bytes past `#size` that could not be cut yet. */
  #tornTail = false;
  /** Puts whose line is queued or written but not yet indexed: the log must keep their lines. */
  #pendingPuts = 0;
  #writes: Promise<unknown> = Promise.resolve();
  /** The fdatasync waiting to start; puts that finish writing before it starts share it. */
  #nextSync: Promise<void> | null = null;
  #runningSync: Promise<void> = Promise.resolve();
  #residentBytes = 0;
  #lock: StoreLock | null = null;
  #recovery: StoreRecovery | null = null;
  /** Log lines for the operator, gathered while the log is replayed. */
  readonly #notes: string[] = [];

  private constructor(options: TrajectoryStoreOptions) {
    this.directory = options.directory;
    this.#memoryLimit = options.memoryLimitBytes ?? Number.POSITIVE_INFINITY;
    this.#fsync = options.fsync ?? 'always';
    this.#openLog = options.openLog ?? openLogFile;
  }

  /**
   * Opens (and replays) the store. With a directory, this store holds it alone until
   * {@link TrajectoryStore.close} (or until the process exits).
   *
   * @throws DressageError `failed_precondition` when another process or store holds the directory.
   */
  static async open(options: TrajectoryStoreOptions): Promise<TrajectoryStore> {
    const store = new TrajectoryStore(options);
    if (options.directory !== null) {
      await mkdir(options.directory, { recursive: true });
      // One process per store, before anything of the log is read.
      store.#lock = lockStoreDirectory(options.directory);
      try {
        await store.#replay(options.directory);
        await store.#claim(options.directory, options.runId ?? null, options.adopt ?? false);
      } catch (error) {
        await store.#file?.close();
        store.#lock.release();
        throw error;
      }
    }
    return store;
  }

  /** What the store found when it opened (null for a memory-only store). */
  get recovery(): StoreRecovery | null {
    return this.#recovery;
  }

  // Records which run the store serves. Another run's trajectories are handed over only on request.
  async #claim(directory: string, runId: string | null, adopt: boolean): Promise<void> {
    const recorded = await readRunId(directory);
    if (recorded !== null && runId !== null && recorded !== runId && this.#entries.size > 0 && !adopt) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `the trajectory store ${directory} holds ${this.#entries.size} trajectories of run ${recorded}, and this process records for run ${runId}: pass --adopt-store to serve them to this run, or give it its own --store-dir`,
        details: { directory, store_run_id: recorded, run_id: runId, trajectories: this.#entries.size },
      });
    }
    const effective =
      runId ??
      recorded ??
      `store-${new Date()
        .toISOString()
        .replace(/[-:]/g, '')
        .replace(/\.\d+Z$/, 'Z')}`;
    const adoptedFrom = recorded !== null && recorded !== effective ? recorded : null;
    if (effective !== recorded) await writeRunId(directory, effective, adoptedFrom);
    let oldest: number | null = null;
    let newest: number | null = null;
    for (const { trajectory } of this.#entries.values()) {
      oldest = Math.min(oldest ?? trajectory.finalizedAt, trajectory.finalizedAt);
      newest = Math.max(newest ?? trajectory.finalizedAt, trajectory.finalizedAt);
    }
    this.#recovery = {
      runId: effective,
      adoptedFrom,
      trajectories: this.#entries.size,
      oldestFinalizedAt: oldest,
      newestFinalizedAt: newest,
      notes: this.#notes,
    };
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

  /**
   * Persists (when a directory is set) and indexes a trajectory. Resolves once the whole line is in
   * the log (and flushed, with fsync `always`).
   *
   * @throws ProxyHttpError 507 when the disk is full, 503 on another I/O error; the log then ends
   *   at its last whole line and the trajectory is not stored.
   */
  async put(trajectory: StoredTrajectory): Promise<void> {
    let offset = -1;
    let byteLength = 0;
    if (this.#file !== null) {
      const line = Buffer.from(serialize(trajectory));
      this.#pendingPuts += 1;
      try {
        ({ offset, byteLength } = await this.#enqueue(() => this.#appendNow(line, 'The trajectory')));
        if (this.#fsync === 'always') await this.#flush();
      } finally {
        this.#pendingPuts -= 1;
      }
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
  ): Promise<{ data: Segment[]; drained: boolean }> {
    const entry = this.#entries.get(trajectoryId);
    if (!entry || (options.instanceId && entry.trajectory.instanceId !== options.instanceId)) {
      return { data: [], drained: false };
    }
    const data = this.#segments(entry, options.view ?? null);
    let drained = false;
    if (options.drain) {
      await this.#drop([trajectoryId]);
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
  }): Promise<Segment[][]> {
    const groups = this.#readyGroups(options.minGroupSize, options.groupTimeoutMs);
    const selected = options.maxGroups ? groups.slice(0, options.maxGroups) : groups;
    const out: Segment[][] = [];
    for (const group of selected) {
      const segments: Segment[] = [];
      for (const entry of group) segments.push(...this.#segments(entry, null));
      out.push(segments);
    }
    // One drop for all: a concurrent batch read cannot hand out the rest of a group a second time.
    await this.#drop(selected.flatMap((group) => group.map((entry) => entry.trajectory.trajectoryId)));
    return out;
  }

  /** Drops a trajectory; returns how many segment records it held. */
  async discard(trajectoryId: string): Promise<number> {
    const entry = this.#entries.get(trajectoryId);
    if (!entry) return 0;
    await this.#drop([trajectoryId]);
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

  /** Waits for pending writes and flushes, and closes the log. */
  async close(): Promise<void> {
    await this.#writes;
    await (this.#nextSync ?? this.#runningSync).catch(() => undefined);
    await this.#file?.close();
    this.#file = null;
    this.#lock?.release();
    this.#lock = null;
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

  #segments(entry: Entry, view: 'lineage' | 'timeline' | null): Segment[] {
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

  // Unindexes the trajectories at once (a concurrent read cannot hand them out again), then records
  // the drop in the log. If the log refuses it, they are indexed again and the error is thrown.
  async #drop(trajectoryIds: readonly string[]): Promise<void> {
    const removed: Entry[] = [];
    for (const id of trajectoryIds) {
      const entry = this.#entries.get(id);
      if (!entry) continue;
      this.#entries.delete(id);
      this.#residentBytes -= entry.residentBytes;
      removed.push(entry);
    }
    if (removed.length === 0 || this.#file === null) return;
    try {
      await this.#enqueue(async () => {
        // Decided in write order: a put whose line is queued or written (but not yet indexed)
        // needs the log, so only a store with nothing indexed and nothing in flight starts afresh.
        if (this.#entries.size === 0 && this.#pendingPuts === 0) {
          await this.#file!.truncate(0);
          this.#size = 0;
          this.#tornTail = false;
          return;
        }
        const lines = removed
          .map((entry) => `${JSON.stringify({ op: 'drop', trajectory_id: entry.trajectory.trajectoryId })}\n`)
          .join('');
        await this.#appendNow(Buffer.from(lines), 'The drop');
      });
    } catch (error) {
      for (const entry of removed) {
        if (this.#entries.has(entry.trajectory.trajectoryId)) continue;
        this.#entries.set(entry.trajectory.trajectoryId, entry);
        this.#residentBytes += entry.residentBytes;
      }
      throw error;
    }
  }

  #enqueue<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#writes.then(task, task);
    this.#writes = run.catch(() => undefined);
    return run;
  }

  // Writes one or more whole lines at the end of the log (inside the write queue). A write that does
  // not fully land is cut off again, so the log always ends at a whole line.
  async #appendNow(line: Buffer, what: string): Promise<{ offset: number; byteLength: number }> {
    const file = this.#file!;
    const offset = this.#size;
    if (this.#tornTail) {
      try {
        await file.truncate(offset);
        this.#tornTail = false;
      } catch (error) {
        throw storageError(error, what);
      }
    }
    let written = 0;
    try {
      while (written < line.length) {
        const { bytesWritten } = await file.write(line, written, line.length - written, offset + written);
        if (bytesWritten <= 0) throw Object.assign(new Error('no bytes written'), { code: 'ENOSPC' });
        written += bytesWritten;
      }
    } catch (error) {
      if (written > 0) {
        try {
          await file.truncate(offset);
        } catch {
          this.#tornTail = true; // cut before the next write
        }
      }
      throw storageError(error, what);
    }
    this.#size += line.length;
    return { offset, byteLength: line.length };
  }

  // Group commit: one fdatasync covers every put whose line was written before it started.
  #flush(): Promise<void> {
    if (this.#nextSync !== null) return this.#nextSync;
    const next: Promise<void> = this.#runningSync.then(async () => {
      this.#nextSync = null;
      this.#runningSync = next.catch(() => undefined);
      try {
        await this.#file!.datasync();
      } catch (error) {
        throw storageError(error, 'The trajectory');
      }
    });
    this.#nextSync = next;
    return next;
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
    let wholeEnd = 0;
    let lineNumber = 0;
    const damaged: DamagedLine[] = [];
    const puts = new Map<string, { offset: number; byteLength: number }>();
    if (fileSize > 0) {
      const descriptor = openSync(path, 'r');
      try {
        readLines(descriptor, fileSize, (offset, line, terminated) => {
          lineNumber += 1;
          if (!terminated) {
            // Only the last line can lack its newline: an append that never fully landed, so it
            // was never acknowledged. It is the one line dropped, and said so.
            dead += 1;
            this.#notes.push(
              `dropped a torn last line of ${path} (line ${lineNumber}, ${line.length} bytes at byte ${offset}): an append that did not finish, never acknowledged`,
            );
            return;
          }
          wholeEnd = offset + line.length + 1;
          const checked = storeLineProblem(line.toString('utf8'));
          if ('problem' in checked) {
            damaged.push({ line: lineNumber, offset, problem: checked.problem });
            return;
          }
          const parsed = checked.line;
          if (parsed.op === 'put') {
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
          } else {
            dead += 2;
            puts.delete(parsed.trajectory_id);
            this.#entries.delete(parsed.trajectory_id);
          }
        });
      } finally {
        closeSync(descriptor);
      }
    }
    if (damaged.length > 0) {
      // Nothing is rewritten: a damaged line may be the only copy of a confirmed trajectory.
      this.#entries.clear();
      const [first] = damaged as [DamagedLine];
      throw new DressageError({
        code: 'data_loss',
        message: `the trajectory log ${path} is damaged: line ${first.line} is ${first.problem}${damaged.length > 1 ? ` (and ${damaged.length - 1} more lines)` : ''}. Nothing was changed. Run \`dressage-proxy repair-store --store-dir ${directory}\` to move the damaged lines to ${quarantineName} and start with the rest`,
        details: { path, damaged },
      });
    }
    if (dead > 0) {
      const compacted = await this.#compact(path);
      if (compacted !== null) {
        await syncDirectory(directory);
        fileSize = compacted;
      } else if (wholeEnd < fileSize) {
        // No room to compact: keep the log as it is, minus the line that never fully landed.
        const log = await this.#openLog(path);
        try {
          await log.truncate(wholeEnd);
        } finally {
          await log.close();
        }
        fileSize = wholeEnd;
      }
    }
    this.#file = await this.#openLog(path);
    if (fileSize === 0) await syncDirectory(directory); // the log's name survives power loss too
    this.#size = fileSize;
    this.#residentBytes = 0;
    for (const entry of this.#entries.values()) this.#residentBytes += entry.residentBytes;
    this.#evictIfNeeded();
  }

  // Copies the live lines into a fresh log and swaps it in atomically. Returns its size, or null
  // (and leaves the old log untouched) when the copy does not fully land.
  async #compact(path: string): Promise<number | null> {
    const temporary = `${path}.compact`;
    const source = openSync(path, 'r');
    const offsets: number[] = [];
    let size = 0;
    try {
      const target = await open(temporary, 'w');
      try {
        for (const entry of this.#entries.values()) {
          const buffer = Buffer.alloc(entry.byteLength);
          readSync(source, buffer, 0, entry.byteLength, entry.offset);
          let written = 0;
          while (written < buffer.length) {
            const { bytesWritten } = await target.write(
              buffer,
              written,
              buffer.length - written,
              size + written,
            );
            if (bytesWritten <= 0)
              throw new DressageError({
                code: 'data_loss',
                message: 'compaction wrote no bytes',
                details: { path: temporary },
              });
            written += bytesWritten;
          }
          offsets.push(size);
          size += buffer.length;
        }
        await target.sync();
      } finally {
        await target.close();
      }
      await rename(temporary, path);
    } catch {
      await rm(temporary, { force: true });
      return null;
    } finally {
      closeSync(source);
    }
    let index = 0;
    for (const entry of this.#entries.values()) entry.offset = offsets[index++]!;
    return size;
  }
}

async function syncDirectory(directory: string): Promise<void> {
  const handle = await open(directory, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** What {@link repairStore} did. */
export interface StoreRepair {
  /** Lines moved to the quarantine file. */
  moved: number;
  /** Lines the log kept. */
  kept: number;
  /** The quarantine file (appended to, never overwritten). */
  quarantine: string;
}

/**
 * Moves every line of a store's log that is not a record (including a torn last line) to
 * `trajectories.quarantine.jsonl` beside it, byte for byte, and keeps the rest: what an operator
 * runs when a damaged log keeps the store from opening. The quarantine is on disk before the log
 * is replaced, so no line is ever lost. Takes the store's lock: not while a proxy serves it.
 */
export async function repairStore(directory: string): Promise<StoreRepair> {
  const lock = lockStoreDirectory(directory);
  try {
    const path = join(directory, logName);
    const quarantine = join(directory, quarantineName);
    let size = 0;
    try {
      size = (await stat(path)).size;
    } catch {
      return { moved: 0, kept: 0, quarantine };
    }
    const keep: Buffer[] = [];
    const move: Buffer[] = [];
    const descriptor = openSync(path, 'r');
    try {
      readLines(descriptor, size, (_offset, line, terminated) => {
        const copy = Buffer.concat([line, Buffer.from('\n')]);
        if (terminated && !('problem' in storeLineProblem(line.toString('utf8')))) keep.push(copy);
        else move.push(copy);
      });
    } finally {
      closeSync(descriptor);
    }
    if (move.length === 0) return { moved: 0, kept: keep.length, quarantine };
    const out = await open(quarantine, 'a');
    try {
      await out.write(Buffer.concat(move));
      await out.sync();
    } finally {
      await out.close();
    }
    const temporary = `${path}.repair`;
    const log = await open(temporary, 'w');
    try {
      await log.write(Buffer.concat(keep));
      await log.sync();
    } finally {
      await log.close();
    }
    await rename(temporary, path);
    await syncDirectory(directory);
    return { moved: move.length, kept: keep.length, quarantine };
  } finally {
    lock.release();
  }
}
