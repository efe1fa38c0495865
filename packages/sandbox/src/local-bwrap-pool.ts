import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { Waiters } from '@dressage/protocol/internal';
import type { SlotDirectories } from './bwrap-command.js';
import { defaultSystemMounts } from './bwrap-command.js';
import { type PoolMode, PoolStateFile, type PoolStatus, type SlotState } from './pool-state.js';
import type { ProcessGroupResult } from './process-group.js';
import type { LimitSupport, ResourceLimits } from './resource-limits.js';
import { SlotFiles, type SlotHandle } from './slot-files.js';
import { probeHealth, type SlotCommandOptions, type SlotServer, SlotSupervisor } from './slot-supervisor.js';

/** Options of {@link LocalBwrapPool}. */
export interface LocalBwrapPoolOptions {
  /** Number of slots. Default 4. */
  slots?: number;
  /** Slot dirs live in `<baseDir>/slots/<NNNN>/`. Default `/tmp/dressage-local-bwrap/node-<pid>`. */
  baseDir?: string;
  mode?: PoolMode;
  /** Slot `i` serves on `basePort + i` in blackbox mode. Default 31000. */
  basePort?: number;
  /** Host that leases advertise in their URLs. Default 127.0.0.1. */
  advertiseHost?: string;
  /** Prepare every slot at `start()` (warm) instead of on first acquire (cold). Default true. */
  prewarm?: boolean;
  unsharePid?: boolean;
  /**
   * A network namespace of the slot's own, with only a private loopback: nothing on the host's
   * network (other slots, the engine, the trainer, any host port) is reachable from inside. Default
   * false in `command_only` mode (where it means no network at all) and true in `blackbox` mode,
   * where the slot server listens on a unix socket in the slot's directory, which the pool pipes to
   * `basePort + slot` on the host, and model requests leave through the one pipe to `upstreamUrl`.
   * `false` in blackbox mode shares the host network (the server listens on a host port).
   */
  unshareNet?: boolean;
  /**
   * The recording proxy (`http://host:port`, plain HTTP) that network-isolated blackbox slots may reach: each
   * slot's LLM proxy sends its model requests through a unix socket whose host end connects only
   * here, whatever `router` a registration names. Without it such slots have no way out at all.
   * The host end passes only the model routes (`POST /v1/chat/completions`, `GET /v1/models`),
   * pinned to the session of the slot's lease; everything else is refused with 403.
   */
  upstreamUrl?: string;
  /**
   * The recording proxy's key: the host end of each slot's upstream socket adds it to the requests
   * it lets through, so that the key never enters a sandbox.
   */
  upstreamApiKey?: string;
  /** Read-only binds. Default: the system dirs (plus the server's own mounts in blackbox mode). */
  readOnlyMounts?: readonly string[];
  /** Added to the read-only binds (agent CLI installs, datasets). */
  extraReadOnlyMounts?: readonly string[];
  /** Environment added to every sandboxed process. */
  env?: Record<string, string>;
  /**
   * The server every slot runs in blackbox mode (required there): `blackboxSlotServer()` of
   * `@dressage/paddock` is the BlackboxServer.
   */
  server?: SlotServer;
  /** Lease time-to-live; expired leases are released by the health loop. `0` disables. Default 2100 s. */
  leaseTtlSeconds?: number;
  /** How long `acquire` waits for a free slot. Default 1800 s. */
  acquireTimeoutSeconds?: number;
  /** Health loop period. Default 10 s; `0` disables the loop. */
  healthIntervalSeconds?: number;
  /** Server startup budget (blackbox mode). Default 60 s. */
  startupTimeoutSeconds?: number;
  limits?: ResourceLimits;
  /**
   * Bytes a slot may write in all (its workspace, home, /tmp and runtime together). When the pool
   * runs as root, each slot's directory is a tmpfs of this size, so the kernel enforces it: a write
   * past it fails with ENOSPC inside the slot, and the host's disk never fills. tmpfs pages are
   * memory, charged to the slot's memory cgroup where {@link ResourceLimits.memoryBytes} is set.
   * Default 4 GiB; 0 disables. Without root no quota applies ({@link LocalBwrapPool.diskQuota} says so).
   */
  diskLimitBytes?: number;
  bwrapPath?: string;
  /**
   * When the pool runs as root, slot `i` runs as the unprivileged host uid and gid
   * `sandboxHostUid + i` (default 100000), so that nothing in a sandbox has root's rights on host
   * files (a user namespace started by root maps its users to root). Ignored otherwise: the user
   * namespace then maps the sandbox user to the caller, who is unprivileged already.
   */
  sandboxHostUid?: number;
  /** Write `<baseDir>/pool.json` for `dressage-local-bwrap status|stop`. Default true. */
  writeStateFile?: boolean;
}

/** A slot held for a trajectory. */
export interface PoolLease {
  leaseId: string;
  trajectoryId: string;
  /**
   * The recording-proxy session the slot's model calls are recorded under (blackbox mode pins the
   * slot's upstream to it). The trajectory id unless the acquire named another.
   */
  sessionId: string;
  slotId: number;
  port: number;
  sandboxUrl: string;
  generation: number;
  poolMode: PoolMode;
  acquiredAt: number;
  expiresAt: number | null;
  /**
   * Headers every call to the slot's server must carry (its bearer token, blackbox mode). Other
   * slots and host processes do not have it, so they cannot drive the server.
   */
  headers: Record<string, string>;
}

interface Slot extends SlotHandle {
  state: SlotState;
  lease: PoolLease | null;
  error: string | null;
  failures: number;
}

// States in which a slot is on its way to ready; `settled()` waits them out.
const TRANSIENT_STATES: readonly SlotState[] = ['releasing', 'resetting', 'restarting', 'starting'];

/**
 * A pool of bubblewrap sandbox slots on this machine. Each slot has its own home, work, runtime and
 * tmp directories, wiped between leases; acquire and release are idempotent per trajectory id.
 *
 * The pool schedules leases, resets and the health loop; its parts do the rest: {@link SlotFiles}
 * (directories, quota, identity), {@link SlotSupervisor} (sandboxes, commands, the slot server and
 * its pipes) and {@link PoolStateFile} (`pool.json`).
 *
 * @example
 * ```ts
 * const pool = new LocalBwrapPool({ slots: 2, mode: 'command_only', unshareNet: true });
 * await pool.start();
 * const lease = await pool.acquire('traj-1');
 * const result = await pool.runInSlot(lease, 'echo hi > note.txt && cat note.txt');
 * await pool.release('traj-1');
 * await pool.stop();
 * ```
 */
export class LocalBwrapPool {
  readonly mode: PoolMode;
  readonly baseDir: string;
  readonly #options: LocalBwrapPoolOptions;
  readonly #files: SlotFiles;
  readonly #supervisor: SlotSupervisor;
  readonly #state: PoolStateFile;
  readonly #slots: Slot[] = [];
  readonly #leases = new Map<string, PoolLease>();
  readonly #pendingAcquires = new Map<string, Promise<PoolLease>>();
  readonly #resets = new Set<Promise<void>>();
  readonly #changed = new Waiters();
  #healthTimer: NodeJS.Timeout | null = null;
  #stopped = false;
  #started = false;

  constructor(options: LocalBwrapPoolOptions = {}) {
    this.#options = options;
    this.mode = options.mode ?? 'command_only';
    this.baseDir = options.baseDir ?? `/tmp/dressage-local-bwrap/node-${process.pid}`;
    const isolated = this.mode === 'blackbox' && (options.unshareNet ?? true);
    const server = this.mode === 'blackbox' ? (options.server ?? null) : null;
    if (this.mode === 'blackbox' && server === null) {
      throw new DressageError({
        code: 'invalid_argument',
        message:
          'a blackbox pool needs `server`, the program each slot runs (the BlackboxServer: `blackboxSlotServer()` of @dressage/paddock)',
      });
    }
    this.#files = new SlotFiles({
      baseDir: this.baseDir,
      diskLimitBytes: options.diskLimitBytes,
      sandboxHostUid: options.sandboxHostUid,
      network: isolated,
    });
    this.#supervisor = new SlotSupervisor({
      files: this.#files,
      portOf: (slotId) => (options.basePort ?? 31000) + slotId,
      server,
      readOnlyMounts: [
        ...(options.readOnlyMounts ?? defaultSystemMounts),
        ...(server?.readOnlyMounts ?? []),
        ...(options.extraReadOnlyMounts ?? []),
      ],
      isolated,
      unshareNet: this.mode === 'blackbox' ? isolated : (options.unshareNet ?? false),
      unsharePid: options.unsharePid ?? true,
      upstream: options.upstreamUrl === undefined ? null : parseUpstream(options.upstreamUrl),
      upstreamApiKey: options.upstreamApiKey,
      advertiseHost: options.advertiseHost ?? '127.0.0.1',
      startupTimeoutSeconds: options.startupTimeoutSeconds ?? 60,
      env: options.env ?? {},
      limits: options.limits ?? {},
      bwrapPath: options.bwrapPath,
    });
    this.#state = new PoolStateFile(this.baseDir);
    const count = options.slots ?? 4;
    for (let id = 0; id < count; id++) {
      this.#slots.push({
        id,
        state: 'empty',
        generation: 0,
        directories: this.#files.directoriesOf(id),
        lease: null,
        error: null,
        failures: 0,
      });
    }
  }

  /**
   * The host uid and gid slot `slotId` runs as, or null when the pool does not run as root (the
   * sandbox user is then the caller's own uid, through a user namespace).
   */
  hostIdentityOf(slotId: number): { uid: number; gid: number } | null {
    return this.#files.hostIdentityOf(slotId);
  }

  /**
   * Hands host paths the pool created in a leased slot (files written for it) to the slot's
   * identity, so that the sandboxed agent can change them. Nothing to do when not running as root.
   */
  async giveToSlot(lease: PoolLease, paths: readonly string[]): Promise<void> {
    await this.#files.giveTo(this.#checkLease(lease).id, paths);
  }

  /** Which resource limits apply here. */
  get limitSupport(): LimitSupport {
    return this.#supervisor.limitSupport;
  }

  /** The per-slot write quota in force (bytes), or null with the reason none applies. */
  get diskQuota(): { bytes: number | null; reason: string | null } {
    return this.#files.diskQuota;
  }

  /** Prepares the slots (all of them when prewarming) and starts the health loop. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    await mkdir(join(this.baseDir, 'slots'), { recursive: true });
    if (this.#options.prewarm ?? true) {
      await Promise.all(this.#slots.map((slot) => this.#prepare(slot)));
    }
    const interval = (this.#options.healthIntervalSeconds ?? 10) * 1000;
    if (interval > 0) {
      this.#healthTimer = setInterval(() => void this.checkHealth(), interval);
      this.#healthTimer.unref();
    }
    this.#persistState();
  }

  /**
   * Leases a slot to `trajectoryId`, waiting for one to free up. Calling it again for the same
   * trajectory returns the same lease. `sessionId` is the recording-proxy session the slot's model
   * calls may use (default: the trajectory id).
   */
  async acquire(trajectoryId: string, options: { sessionId?: string } = {}): Promise<PoolLease> {
    if (this.#stopped)
      throw new DressageError({ code: 'unavailable', message: 'the sandbox pool is stopped' });
    if (!this.#started) await this.start();
    const existing = this.#leases.get(trajectoryId);
    if (existing) return existing;
    const pending = this.#pendingAcquires.get(trajectoryId);
    if (pending) return pending;
    const attempt = this.#acquireSlot(trajectoryId, options.sessionId ?? trajectoryId).finally(() =>
      this.#pendingAcquires.delete(trajectoryId),
    );
    this.#pendingAcquires.set(trajectoryId, attempt);
    return attempt;
  }

  /** Releases the slot of `trajectoryId` (or of the lease) and resets it in the background. Idempotent. */
  async release(leaseOrTrajectoryId: PoolLease | string): Promise<void> {
    const trajectoryId =
      typeof leaseOrTrajectoryId === 'string' ? leaseOrTrajectoryId : leaseOrTrajectoryId.trajectoryId;
    const pending = this.#pendingAcquires.get(trajectoryId);
    if (pending) await pending.catch(() => undefined);
    const lease = this.#leases.get(trajectoryId);
    if (!lease) return;
    if (typeof leaseOrTrajectoryId !== 'string' && leaseOrTrajectoryId.leaseId !== lease.leaseId) return;
    this.#leases.delete(trajectoryId);
    // A stopping pool stops every slot itself.
    if (this.#stopped) return;
    const slot = this.#slots[lease.slotId] as Slot;
    slot.lease = null;
    slot.state = 'releasing';
    this.#persistState();
    this.#track(this.#reset(slot, true));
  }

  /** Resolves when no slot is releasing or resetting (tests and benchmarks use it). */
  async settled(): Promise<void> {
    while (this.#slots.some((slot) => TRANSIENT_STATES.includes(slot.state))) await this.#waitForChange(50);
  }

  /** The lease of `trajectoryId`, if it holds one. */
  leaseOf(trajectoryId: string): PoolLease | undefined {
    return this.#leases.get(trajectoryId);
  }

  /** Host directories of a leased slot. */
  directoriesOf(lease: PoolLease): SlotDirectories {
    const slot = this.#checkLease(lease);
    const { home, work, runtime, tmp } = slot.directories;
    return { home, work, runtime, tmp };
  }

  /**
   * Runs `/bin/sh -lc <cmd>` in a fresh sandbox over the slot's directories. The sandbox is its own
   * process group (and PID namespace): on timeout or abort everything it started is killed.
   */
  async runInSlot(
    lease: PoolLease,
    cmd: string,
    options: SlotCommandOptions = {},
  ): Promise<ProcessGroupResult> {
    return this.#supervisor.run(this.#checkLease(lease), cmd, options);
  }

  /** One pass of the health loop: expire leases, probe servers, restart failed slots. */
  async checkHealth(): Promise<void> {
    if (this.#stopped) return;
    const now = Date.now();
    for (const lease of [...this.#leases.values()]) {
      if (lease.expiresAt !== null && lease.expiresAt <= now) await this.release(lease.trajectoryId);
    }
    for (const slot of this.#slots) {
      if (slot.state === 'failed' && slot.failures < 5) {
        slot.state = 'releasing';
        this.#track(this.#reset(slot));
        continue;
      }
      if (this.mode !== 'blackbox') continue;
      if (slot.state !== 'ready' && slot.state !== 'leased') continue;
      const healthy = await probeHealth(`http://127.0.0.1:${this.#portOf(slot)}/health`, 2000);
      if (healthy) continue;
      if (slot.state === 'ready') {
        slot.state = 'dead';
        this.#track(this.#reset(slot));
      } else {
        slot.state = 'lost';
        slot.error = 'the slot server stopped answering while leased';
      }
    }
    this.#persistState();
  }

  /** A snapshot of every slot. */
  status(): PoolStatus {
    const counts: Partial<Record<SlotState, number>> = {};
    for (const slot of this.#slots) counts[slot.state] = (counts[slot.state] ?? 0) + 1;
    return {
      pid: process.pid,
      mode: this.mode,
      baseDir: this.baseDir,
      slots: this.#slots.map((slot) => ({
        slotId: slot.id,
        state: slot.state,
        generation: slot.generation,
        trajectoryId: slot.lease?.trajectoryId ?? null,
        port: this.#portOf(slot),
        error: slot.error,
      })),
      counts,
      limits: this.#supervisor.limitSupport,
      leases: this.#leases.size,
    };
  }

  /** Kills every sandbox, releases every lease and removes the slot directories. */
  async stop(options: { keepDirectories?: boolean } = {}): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#healthTimer) clearInterval(this.#healthTimer);
    this.#notify();
    await Promise.allSettled([...this.#pendingAcquires.values()]);
    // A reset in flight (a released lease) may be bringing its slot's next sandbox up, quota tmpfs
    // included: it finishes first, so that what follows stops and unmounts all it started. (Unmounted
    // before that tmpfs was mounted, the slot's directory stayed busy and its removal failed.)
    while (this.#resets.size > 0) await Promise.all([...this.#resets]);
    this.#leases.clear();
    await Promise.all(this.#slots.map((slot) => this.#supervisor.stop(slot.id)));
    for (const slot of this.#slots) {
      slot.state = 'empty';
      slot.lease = null;
    }
    this.#supervisor.removeCgroups(this.#slots.length);
    await Promise.all(this.#slots.map((slot) => this.#files.unmount(slot)));
    await this.#state.flushed();
    await this.#files.settled();
    if (!options.keepDirectories) await rm(this.baseDir, { recursive: true, force: true, maxRetries: 3 });
  }

  async #acquireSlot(trajectoryId: string, sessionId: string): Promise<PoolLease> {
    const deadline = Date.now() + (this.#options.acquireTimeoutSeconds ?? 1800) * 1000;
    while (true) {
      if (this.#stopped)
        throw new DressageError({ code: 'unavailable', message: 'the sandbox pool is stopped' });
      const ready = this.#slots.find((slot) => slot.state === 'ready');
      const cold = ready ? undefined : this.#slots.find((slot) => slot.state === 'empty');
      const slot = ready ?? cold;
      if (slot) {
        // Claim before any await so that concurrent acquires never share a slot.
        slot.state = cold ? 'starting' : 'leased';
        if (cold) {
          try {
            await this.#prepare(slot, true);
          } catch (error) {
            this.#notify();
            throw error;
          }
        }
        const lease = this.#makeLease(slot, trajectoryId, sessionId);
        slot.state = 'leased';
        slot.lease = lease;
        this.#leases.set(trajectoryId, lease);
        this.#persistState();
        return lease;
      }
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        throw new DressageError({
          code: 'resource_exhausted',
          message: `no sandbox slot became free within ${this.#options.acquireTimeoutSeconds ?? 1800} s`,
          details: { trajectory_id: trajectoryId, slots: this.#slots.length },
        });
      }
      await this.#waitForChange(Math.min(remaining, 250));
    }
  }

  #makeLease(slot: Slot, trajectoryId: string, sessionId: string): PoolLease {
    const port = this.#portOf(slot);
    const ttl = (this.#options.leaseTtlSeconds ?? 2100) * 1000;
    const now = Date.now();
    const slotLabel = String(slot.id).padStart(4, '0');
    const trajectoryLabel = trajectoryId.replace(/[^A-Za-z0-9]/g, '').slice(0, 32);
    const token = this.#supervisor.tokenOf(slot.id);
    return {
      headers: token === null ? {} : { authorization: `Bearer ${token}` },
      leaseId: `lease-${String(process.pid).padStart(12, '0').slice(-12)}-${slotLabel}-gen${slot.generation}-${trajectoryLabel}-${randomBytes(4).toString('hex')}`,
      trajectoryId,
      sessionId,
      slotId: slot.id,
      port,
      sandboxUrl: `http://${this.#options.advertiseHost ?? '127.0.0.1'}:${port}`,
      generation: slot.generation,
      poolMode: this.mode,
      acquiredAt: now,
      expiresAt: ttl > 0 ? now + ttl : null,
    };
  }

  // Waits until a slot changes state or `ms` pass, whichever comes first.
  async #waitForChange(ms: number): Promise<void> {
    await this.#changed.wait({ timeoutMs: ms });
  }

  #notify(): void {
    this.#changed.wakeAll();
  }

  #checkLease(lease: PoolLease): Slot {
    const current = this.#leases.get(lease.trajectoryId);
    if (!current || current.leaseId !== lease.leaseId) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `lease ${lease.leaseId} is no longer held (released or expired)`,
        details: { trajectory_id: lease.trajectoryId },
      });
    }
    return this.#slots[lease.slotId] as Slot;
  }

  #portOf(slot: Slot): number {
    return (this.#options.basePort ?? 31000) + slot.id;
  }

  // Directories, then the slot server (blackbox mode).
  async #bringUp(slot: Slot): Promise<void> {
    await this.#files.create(slot);
    if (this.mode === 'blackbox')
      await this.#supervisor.startServer(slot, () => slot.lease?.sessionId ?? null);
  }

  async #prepare(slot: Slot, claimed = false): Promise<void> {
    if (!claimed) slot.state = 'starting';
    try {
      await this.#bringUp(slot);
      slot.error = null;
      slot.failures = 0;
      if (!claimed) slot.state = 'ready';
    } catch (error) {
      slot.state = 'failed';
      slot.error = error instanceof Error ? error.message : String(error);
      slot.failures += 1;
      this.#persistState();
      throw error;
    } finally {
      if (!claimed) this.#notify();
    }
  }

  #track(work: Promise<void>): void {
    this.#resets.add(work);
    void work.finally(() => this.#resets.delete(work));
  }

  // `recycle`: a released lease, whose slot server may stay up (see SlotServer.recyclePath).
  async #reset(slot: Slot, recycle = false): Promise<void> {
    const generation = slot.generation;
    try {
      slot.state = 'resetting';
      if (recycle && (await this.#recycle(slot))) return;
      await this.#supervisor.stop(slot.id);
      await this.#files.wipe(slot);
      if (slot.generation !== generation || this.#stopped) return;
      slot.generation += 1;
      slot.state = 'restarting';
      await this.#bringUp(slot);
      slot.state = 'ready';
      slot.error = null;
    } catch (error) {
      slot.state = 'failed';
      slot.error = error instanceof Error ? error.message : String(error);
    } finally {
      this.#persistState();
      this.#notify();
    }
  }

  // A released slot whose server keeps running (it answered its recycle route): the lease's commands
  // killed, its files gone, the server's runtime directory kept. False: restart the slot instead.
  async #recycle(slot: Slot): Promise<boolean> {
    if (this.mode !== 'blackbox' || slot.state !== 'resetting' || this.#stopped) return false;
    if (!(await this.#supervisor.recycle(slot.id))) return false;
    try {
      await this.#files.empty(slot);
    } catch {
      return false;
    }
    if (this.#stopped) return false;
    slot.generation += 1;
    slot.state = 'ready';
    slot.error = null;
    return true;
  }

  #persistState(): void {
    if (this.#options.writeStateFile === false || !this.#started) return;
    this.#state.write(this.status());
  }
}

function parseUpstream(url: string): { host: string; port: number } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new DressageError({ code: 'invalid_argument', message: `upstreamUrl is not a URL: ${url}` });
  }
  // The slot's LLM proxy speaks plain HTTP into its pipe, so the far end must too.
  if (parsed.protocol !== 'http:') {
    throw new DressageError({ code: 'invalid_argument', message: `upstreamUrl must be http://: ${url}` });
  }
  const port = parsed.port === '' ? 80 : Number(parsed.port);
  return { host: parsed.hostname.replace(/^\[|\]$/g, ''), port };
}
