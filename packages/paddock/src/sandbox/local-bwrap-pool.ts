import type { ChildProcess } from 'node:child_process';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { chown, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { DressageError } from '@dressage/protocol';
import { isLoopbackAddress } from '@dressage/protocol/internal';
import {
  buildBwrapArgs,
  defaultSystemMounts,
  type HostIdentity,
  type SlotDirectories,
  sandboxBaseEnv,
  sandboxPaths,
  userNamespaceSeccompProgram,
} from './bwrap-command.js';
import { killProcessGroup, type ProcessGroupResult, runProcessGroup } from './process-group.js';
import { type LimitSupport, type ResourceLimits, SlotCgroups } from './resource-limits.js';
import { startSocketPipe } from './socket-pipe.js';
import { startUpstreamGate } from './upstream-gate.js';

// What a coding task writes: a repository, its dependencies and build output.
const DEFAULT_DISK_LIMIT_BYTES = 4 * 1024 ** 3;
const execFileAsync = promisify(execFile);

// The descriptor bwrap reads the slot's seccomp program from.
const SECCOMP_FD = 9;

/** Lifecycle states of a pool slot. */
export type SlotState =
  | 'empty'
  | 'starting'
  | 'ready'
  | 'leased'
  | 'releasing'
  | 'resetting'
  | 'restarting'
  | 'failed'
  | 'dead'
  | 'lost';

/**
 * `blackbox`: every slot runs a BlackboxServer, reached at `basePort + slot` on the host; each server
 * requires its slot's own bearer token, which only the pool and the lease holder know. By default
 * the slot has its own network namespace, and the pool's socket pipes are its only ways in and out.
 * `command_only`: no server; commands and files go through the pool.
 */
export type PoolMode = 'blackbox' | 'command_only';

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
  /** Read-only binds. Default: the system dirs, plus the install root of the server in blackbox mode. */
  readOnlyMounts?: readonly string[];
  /** Added to the read-only binds (agent CLI installs, datasets). */
  extraReadOnlyMounts?: readonly string[];
  /** Environment added to every sandboxed process. */
  env?: Record<string, string>;
  /** Command that starts the slot's server (blackbox mode). Default: this package's `dressage-blackbox-server`. */
  serverCommand?: readonly string[];
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

/** One slot in {@link PoolStatus}. */
export interface SlotStatus {
  slotId: number;
  state: SlotState;
  generation: number;
  trajectoryId: string | null;
  port: number;
  error: string | null;
}

/** A snapshot of the pool. */
export interface PoolStatus {
  pid: number;
  mode: PoolMode;
  baseDir: string;
  slots: SlotStatus[];
  counts: Partial<Record<SlotState, number>>;
  limits: LimitSupport;
  leases: number;
}

interface Slot {
  id: number;
  state: SlotState;
  generation: number;
  directories: SlotDirectories & { root: string };
  lease: PoolLease | null;
  server: ChildProcess | null;
  /** Bearer token of the running server; a new one at every server start. */
  token: string | null;
  /** The host ends of a network-isolated slot: the server's port and the upstream socket. */
  pipes: { close(): Promise<void> }[];
  running: Set<ChildProcess>;
  /** The slot's directory is a size-limited tmpfs mounted by the pool. */
  quotaMounted: boolean;
  error: string | null;
  failures: number;
}

/** Options of {@link LocalBwrapPool.runInSlot}. */
export interface SlotCommandOptions {
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  stdin?: string;
  signal?: AbortSignal;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The directory above `path` that holds the outermost `node_modules` (a workspace or install root). */
export function findInstallRoot(path: string): string {
  let current = dirname(path);
  let root = current;
  while (true) {
    if (existsSync(join(current, 'node_modules'))) root = current;
    const parent = dirname(current);
    if (parent === current) return root;
    current = parent;
  }
}

/** The built `dressage-blackbox-server` script of this package, from source or from dist. */
export function defaultServerScript(): string {
  const candidates = [
    new URL('./bin/dressage-blackbox-server.js', import.meta.url),
    new URL('../../dist/bin/dressage-blackbox-server.js', import.meta.url),
    new URL('../dist/bin/dressage-blackbox-server.js', import.meta.url),
  ];
  for (const candidate of candidates) {
    const path = fileURLToPath(candidate);
    if (existsSync(path)) return path;
  }
  throw new DressageError({
    code: 'failed_precondition',
    message: 'dressage-blackbox-server is not built: run `pnpm --filter @dressage/paddock build`',
  });
}

/**
 * A pool of bubblewrap sandbox slots on this machine. Each slot has its own home, work, runtime and
 * tmp directories, wiped between leases; acquire and release are idempotent per trajectory id.
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
  private readonly options: LocalBwrapPoolOptions;
  private readonly slots: Slot[] = [];
  private readonly leases = new Map<string, PoolLease>();
  private readonly pendingAcquires = new Map<string, Promise<PoolLease>>();
  private readonly cgroups: SlotCgroups;
  private readonly readOnlyMounts: string[];
  private readonly serverCommand: readonly string[] | null;
  private readonly identityBase: number | null;
  /** Blackbox slots in their own network namespace, reached through unix sockets. */
  private readonly isolated: boolean;
  private readonly upstream: { host: string; port: number } | null;
  private waiters: (() => void)[] = [];
  private healthTimer: NodeJS.Timeout | null = null;
  private stopped = false;
  private started = false;
  private stateWrite: Promise<void> = Promise.resolve();
  private readonly removals = new Set<Promise<void>>();

  constructor(options: LocalBwrapPoolOptions = {}) {
    this.options = options;
    this.mode = options.mode ?? 'command_only';
    this.baseDir = options.baseDir ?? `/tmp/dressage-local-bwrap/node-${process.pid}`;
    this.isolated = this.mode === 'blackbox' && (options.unshareNet ?? true);
    this.upstream = options.upstreamUrl === undefined ? null : parseUpstream(options.upstreamUrl);
    this.serverCommand =
      this.mode === 'blackbox'
        ? (options.serverCommand ?? ['/usr/bin/env', 'node', defaultServerScript()])
        : null;
    const mounts = [...(options.readOnlyMounts ?? defaultSystemMounts)];
    if (this.mode === 'blackbox' && options.serverCommand === undefined && this.serverCommand !== null) {
      mounts.push(findInstallRoot(this.serverCommand[2] as string));
    }
    mounts.push(...(options.extraReadOnlyMounts ?? []));
    this.readOnlyMounts = mounts;
    this.identityBase = process.getuid?.() === 0 ? (options.sandboxHostUid ?? 100_000) : null;
    if (this.identityBase !== null && !existsSync('/usr/bin/setpriv')) {
      throw new DressageError({
        code: 'failed_precondition',
        message:
          'running as root, the pool drops sandboxes to an unprivileged uid with /usr/bin/setpriv (util-linux), which is missing',
      });
    }
    this.cgroups = new SlotCgroups(
      `dressage-${process.pid}-${randomBytes(3).toString('hex')}`,
      options.limits ?? {},
    );
    const count = options.slots ?? 4;
    for (let id = 0; id < count; id++) {
      const root = join(this.baseDir, 'slots', String(id).padStart(4, '0'));
      this.slots.push({
        id,
        state: 'empty',
        generation: 0,
        directories: {
          root,
          home: join(root, 'home'),
          work: join(root, 'work'),
          runtime: join(root, 'runtime'),
          tmp: join(root, 'tmp'),
          ...(this.isolated ? { network: join(root, 'network') } : {}),
        },
        lease: null,
        server: null,
        token: null,
        pipes: [],
        running: new Set(),
        quotaMounted: false,
        error: null,
        failures: 0,
      });
    }
  }

  /**
   * The host uid and gid slot `slotId` runs as, or null when the pool does not run as root (the
   * sandbox user is then the caller's own uid, through a user namespace).
   */
  hostIdentityOf(slotId: number): HostIdentity | null {
    if (this.identityBase === null) return null;
    return { uid: this.identityBase + slotId, gid: this.identityBase + slotId };
  }

  /**
   * Hands host paths the pool created in a leased slot (files written for it) to the slot's
   * identity, so that the sandboxed agent can change them. Nothing to do when not running as root.
   */
  async giveToSlot(lease: PoolLease, paths: readonly string[]): Promise<void> {
    const identity = this.hostIdentityOf(this.checkLease(lease).id);
    if (identity === null) return;
    for (const path of paths) await chown(path, identity.uid, identity.gid);
  }

  /** Which resource limits apply here. */
  get limitSupport(): LimitSupport {
    return this.cgroups.support;
  }

  /** Prepares the slots (all of them when prewarming) and starts the health loop. */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    await mkdir(join(this.baseDir, 'slots'), { recursive: true });
    if (this.options.prewarm ?? true) {
      await Promise.all(this.slots.map((slot) => this.prepare(slot)));
    }
    const interval = (this.options.healthIntervalSeconds ?? 10) * 1000;
    if (interval > 0) {
      this.healthTimer = setInterval(() => void this.checkHealth(), interval);
      this.healthTimer.unref();
    }
    this.persistState();
  }

  /**
   * Leases a slot to `trajectoryId`, waiting for one to free up. Calling it again for the same
   * trajectory returns the same lease. `sessionId` is the recording-proxy session the slot's model
   * calls may use (default: the trajectory id).
   */
  async acquire(trajectoryId: string, options: { sessionId?: string } = {}): Promise<PoolLease> {
    if (this.stopped)
      throw new DressageError({ code: 'unavailable', message: 'the sandbox pool is stopped' });
    if (!this.started) await this.start();
    const existing = this.leases.get(trajectoryId);
    if (existing) return existing;
    const pending = this.pendingAcquires.get(trajectoryId);
    if (pending) return pending;
    const attempt = this.acquireSlot(trajectoryId, options.sessionId ?? trajectoryId).finally(() =>
      this.pendingAcquires.delete(trajectoryId),
    );
    this.pendingAcquires.set(trajectoryId, attempt);
    return attempt;
  }

  private async acquireSlot(trajectoryId: string, sessionId: string): Promise<PoolLease> {
    const deadline = Date.now() + (this.options.acquireTimeoutSeconds ?? 1800) * 1000;
    while (true) {
      if (this.stopped)
        throw new DressageError({ code: 'unavailable', message: 'the sandbox pool is stopped' });
      const ready = this.slots.find((slot) => slot.state === 'ready');
      const cold = ready ? undefined : this.slots.find((slot) => slot.state === 'empty');
      const slot = ready ?? cold;
      if (slot) {
        // Claim before any await so that concurrent acquires never share a slot.
        slot.state = cold ? 'starting' : 'leased';
        if (cold) {
          try {
            await this.prepare(slot, true);
          } catch (error) {
            this.notify();
            throw error;
          }
        }
        const lease = this.makeLease(slot, trajectoryId, sessionId);
        slot.state = 'leased';
        slot.lease = lease;
        this.leases.set(trajectoryId, lease);
        this.persistState();
        return lease;
      }
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        throw new DressageError({
          code: 'resource_exhausted',
          message: `no sandbox slot became free within ${this.options.acquireTimeoutSeconds ?? 1800} s`,
          details: { trajectory_id: trajectoryId, slots: this.slots.length },
        });
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(remaining, 250));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  private makeLease(slot: Slot, trajectoryId: string, sessionId: string): PoolLease {
    const port = this.portOf(slot);
    const ttl = (this.options.leaseTtlSeconds ?? 2100) * 1000;
    const now = Date.now();
    const slotLabel = String(slot.id).padStart(4, '0');
    const trajectoryLabel = trajectoryId.replace(/[^A-Za-z0-9]/g, '').slice(0, 32);
    return {
      headers: slot.token === null ? {} : { authorization: `Bearer ${slot.token}` },
      leaseId: `lease-${String(process.pid).padStart(12, '0').slice(-12)}-${slotLabel}-gen${slot.generation}-${trajectoryLabel}-${randomBytes(4).toString('hex')}`,
      trajectoryId,
      sessionId,
      slotId: slot.id,
      port,
      sandboxUrl: `http://${this.options.advertiseHost ?? '127.0.0.1'}:${port}`,
      generation: slot.generation,
      poolMode: this.mode,
      acquiredAt: now,
      expiresAt: ttl > 0 ? now + ttl : null,
    };
  }

  private notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  /** Releases the slot of `trajectoryId` (or of the lease) and resets it in the background. Idempotent. */
  async release(leaseOrTrajectoryId: PoolLease | string): Promise<void> {
    const trajectoryId =
      typeof leaseOrTrajectoryId === 'string' ? leaseOrTrajectoryId : leaseOrTrajectoryId.trajectoryId;
    const pending = this.pendingAcquires.get(trajectoryId);
    if (pending) await pending.catch(() => undefined);
    const lease = this.leases.get(trajectoryId);
    if (!lease) return;
    if (typeof leaseOrTrajectoryId !== 'string' && leaseOrTrajectoryId.leaseId !== lease.leaseId) return;
    this.leases.delete(trajectoryId);
    const slot = this.slots[lease.slotId] as Slot;
    slot.lease = null;
    slot.state = 'releasing';
    this.persistState();
    this.track(this.reset(slot));
  }

  /** Resolves when no slot is releasing or resetting (tests and benchmarks use it). */
  async settled(): Promise<void> {
    while (
      this.slots.some((slot) => ['releasing', 'resetting', 'restarting', 'starting'].includes(slot.state))
    ) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 50);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** The lease of `trajectoryId`, if it holds one. */
  leaseOf(trajectoryId: string): PoolLease | undefined {
    return this.leases.get(trajectoryId);
  }

  /** Host directories of a leased slot. */
  directoriesOf(lease: PoolLease): SlotDirectories {
    const slot = this.checkLease(lease);
    const { home, work, runtime, tmp } = slot.directories;
    return { home, work, runtime, tmp };
  }

  private checkLease(lease: PoolLease): Slot {
    const current = this.leases.get(lease.trajectoryId);
    if (!current || current.leaseId !== lease.leaseId) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `lease ${lease.leaseId} is no longer held (released or expired)`,
        details: { trajectory_id: lease.trajectoryId },
      });
    }
    return this.slots[lease.slotId] as Slot;
  }

  private portOf(slot: Slot): number {
    return (this.options.basePort ?? 31000) + slot.id;
  }

  /** The seccomp program every sandbox starts under (null where none is known for this machine). */
  private seccompProgramFile: string | null | undefined;

  // No user namespaces inside a slot: the filter bwrap installs before the command starts, written
  // once into the pool's directory.
  private get seccompProgramPath(): string | null {
    if (this.seccompProgramFile === undefined) {
      const program = userNamespaceSeccompProgram();
      if (program === null) this.seccompProgramFile = null;
      else {
        const path = join(this.baseDir, 'no-user-namespaces.bpf');
        mkdirSync(this.baseDir, { recursive: true });
        writeFileSync(path, program, { mode: 0o644 });
        this.seccompProgramFile = path;
      }
    }
    return this.seccompProgramFile;
  }

  private bwrapArgv(
    slot: Slot,
    command: readonly string[],
    env: Record<string, string>,
    cwd?: string,
  ): string[] {
    const identity = this.hostIdentityOf(slot.id);
    const argv = buildBwrapArgs(
      {
        bwrapPath: this.options.bwrapPath,
        hostIdentity: identity ?? undefined,
        readOnlyFiles: identity === null ? [] : this.identityFiles(slot),
        directories: slot.directories,
        hostname: `dressage-bb-${String(slot.id).padStart(4, '0')}`,
        readOnlyMounts: this.readOnlyMounts,
        unsharePid: this.options.unsharePid ?? true,
        unshareNet: this.mode === 'blackbox' ? this.isolated : (this.options.unshareNet ?? false),
        env: sandboxBaseEnv({
          DRESSAGE_BLACKBOX_SLOT_ID: String(slot.id),
          DRESSAGE_BLACKBOX_SLOT_GENERATION: String(slot.generation),
          DRESSAGE_BLACKBOX_SLOT_PORT: String(this.portOf(slot)),
          ...this.options.env,
          ...env,
        }),
        cwd,
        seccompFd: this.seccompProgramPath === null ? undefined : SECCOMP_FD,
      },
      command,
    );
    // bwrap reads the filter from a descriptor: a shell opens the file as that descriptor for it.
    const withFilter =
      this.seccompProgramPath === null
        ? argv
        : ['/bin/sh', '-c', `exec "$@" ${SECCOMP_FD}<"$0"`, this.seccompProgramPath, ...argv];
    return this.cgroups.wrap(slot.id, withFilter);
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
    const slot = this.checkLease(lease);
    const cwd = resolveSandboxCwd(options.cwd);
    const argv = this.bwrapArgv(slot, ['/bin/sh', '-lc', cmd], options.env ?? {}, cwd);
    return runProcessGroup(argv, {
      timeoutMs: options.timeoutMs,
      stdin: options.stdin,
      signal: options.signal,
      onSpawn: (child) => {
        slot.running.add(child);
        child.once('close', () => slot.running.delete(child));
      },
    });
  }

  private async prepare(slot: Slot, claimed = false): Promise<void> {
    if (!claimed) slot.state = 'starting';
    try {
      await this.createDirectories(slot);
      if (this.mode === 'blackbox') await this.startServer(slot);
      slot.error = null;
      slot.failures = 0;
      if (!claimed) slot.state = 'ready';
    } catch (error) {
      slot.state = 'failed';
      slot.error = error instanceof Error ? error.message : String(error);
      slot.failures += 1;
      this.persistState();
      throw error;
    } finally {
      if (!claimed) this.notify();
    }
  }

  /** The per-slot write quota in force (bytes), or null with the reason none applies. */
  get diskQuota(): { bytes: number | null; reason: string | null } {
    const bytes = this.options.diskLimitBytes ?? DEFAULT_DISK_LIMIT_BYTES;
    if (bytes === 0) return { bytes: null, reason: 'diskLimitBytes is 0' };
    if (process.getuid?.() !== 0) return { bytes: null, reason: 'mounting a slot quota needs root' };
    return { bytes, reason: null };
  }

  // The slot's directory as a tmpfs of the quota's size: the kernel refuses writes past it.
  private async mountQuota(slot: Slot): Promise<void> {
    const { bytes } = this.diskQuota;
    if (bytes === null || slot.quotaMounted) return;
    await mkdir(slot.directories.root, { recursive: true, mode: 0o755 });
    await execFileAsync('mount', [
      '-t',
      'tmpfs',
      '-o',
      `size=${bytes},mode=0755`,
      'tmpfs',
      slot.directories.root,
    ]);
    slot.quotaMounted = true;
  }

  private async unmountQuota(slot: Slot): Promise<void> {
    if (!slot.quotaMounted) return;
    // Lazy: a process that has not died yet cannot keep the mount (and the slot) busy.
    await execFileAsync('umount', ['--lazy', slot.directories.root]).catch(() => undefined);
    slot.quotaMounted = false;
  }

  private async createDirectories(slot: Slot): Promise<void> {
    await this.mountQuota(slot);
    const { home, work, runtime, tmp } = slot.directories;
    const writable = [home, work, runtime, tmp];
    await Promise.all(writable.map((dir) => mkdir(dir, { recursive: true, mode: 0o755 })));
    const identity = this.hostIdentityOf(slot.id);
    if (identity === null) return;
    await Promise.all(writable.map((dir) => chown(dir, identity.uid, identity.gid)));
    await this.writeIdentityFiles(slot, identity);
  }

  // The network directory stays the pool's (the sandbox cannot swap the upstream socket for one of
  // its own); only its `server` subdirectory, where the slot server creates its socket, is the slot's.
  private async createNetworkDirectory(slot: Slot): Promise<{ server: string; upstream: string }> {
    const network = slot.directories.network as string;
    const server = join(network, 'server', 'server.sock');
    const upstream = join(network, 'upstream.sock');
    // sockaddr_un holds 107 bytes of path.
    if (Buffer.byteLength(server) > 107) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `slot ${slot.id}: the socket path ${server} is longer than a unix socket allows (107 bytes): use a shorter baseDir`,
      });
    }
    await mkdir(join(network, 'server'), { recursive: true, mode: 0o755 });
    const identity = this.hostIdentityOf(slot.id);
    if (identity !== null) await chown(join(network, 'server'), identity.uid, identity.gid);
    return { server, upstream };
  }

  // The slot's /etc/passwd and /etc/group: the host's, plus the sandbox user under its host uid, so
  // that programs asking who they are (getpwuid) get an answer.
  private identityFiles(slot: Slot): [string, string][] {
    const directory = join(this.baseDir, 'identity', String(slot.id).padStart(4, '0'));
    return [
      [join(directory, 'passwd'), '/etc/passwd'],
      [join(directory, 'group'), '/etc/group'],
    ];
  }

  private async writeIdentityFiles(slot: Slot, identity: HostIdentity): Promise<void> {
    const [[passwd], [group]] = this.identityFiles(slot) as [[string, string], [string, string]];
    if (existsSync(passwd) && existsSync(group)) return;
    await mkdir(dirname(passwd), { recursive: true, mode: 0o755 });
    const host = async (path: string) => (await readFile(path, 'utf8').catch(() => '')).replace(/\n?$/, '\n');
    const { uid, gid } = identity;
    await writeFile(
      passwd,
      `${await host('/etc/passwd')}blackbox:x:${uid}:${gid}:Dressage sandbox:${sandboxPaths.home}:/bin/sh\n`,
      { mode: 0o644 },
    );
    await writeFile(group, `${await host('/etc/group')}blackbox:x:${gid}:\n`, { mode: 0o644 });
  }

  private async startServer(slot: Slot): Promise<void> {
    const port = this.portOf(slot);
    // Leases advertised beyond this machine need the server on every interface; the token guards it.
    const advertised = this.options.advertiseHost ?? '127.0.0.1';
    const listenHost = isLoopbackAddress(advertised) ? '127.0.0.1' : '0.0.0.0';
    const network: Record<string, string> = {};
    if (this.isolated) {
      const sockets = await this.createNetworkDirectory(slot);
      const identity = this.hostIdentityOf(slot.id) ?? undefined;
      network.BBS_SOCKET = `${sandboxPaths.network}/server/server.sock`;
      if (this.upstream !== null) {
        slot.pipes.push(
          await startUpstreamGate({
            listen: { path: sockets.upstream },
            target: this.upstream,
            owner: identity,
            // Asked per request: the slot serves one lease after another.
            sessionOf: () => slot.lease?.sessionId ?? null,
            apiKey: this.options.upstreamApiKey,
          }),
        );
        network.BBS_UPSTREAM_SOCKET = `${sandboxPaths.network}/upstream.sock`;
      }
      slot.pipes.push(
        await startSocketPipe({ listen: { host: listenHost, port }, target: { path: sockets.server } }),
      );
    }
    const argv = this.bwrapArgv(slot, this.serverCommand as readonly string[], {
      ...network,
      BBS_HOST: listenHost,
      BBS_PORT: String(port),
      BBS_RUNTIME_ROOT: sandboxPaths.runtime,
      BBS_INSIDE_SANDBOX: '1',
      // The token travels through the server's stdin: not in its argv or environment (which other
      // processes of the sandbox could read) and not in a file of the slot.
      BBS_API_KEY_FILE: '/dev/stdin',
    });
    const [command, ...args] = argv;
    const token = randomBytes(32).toString('base64url');
    const child = spawn(command as string, args, { detached: true, stdio: ['pipe', 'ignore', 'pipe'] });
    child.stdin?.on('error', () => {});
    child.stdin?.end(`${token}\n`);
    slot.token = token;
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString('utf8')).slice(-4000);
    });
    child.on('error', () => {});
    slot.server = child;
    const deadline = Date.now() + (this.options.startupTimeoutSeconds ?? 60) * 1000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new DressageError({
          code: 'unavailable',
          message: `slot ${slot.id}: the blackbox server exited during startup: ${stderr.trim().slice(-500)}`,
        });
      }
      if (await probeHealth(`http://127.0.0.1:${port}/health`, 2000)) {
        // The server's socket is bound: take its directory back, so that nothing in the slot (its
        // agent) can put a socket of its own in the server's place and be sent the slot's token.
        const identity = this.hostIdentityOf(slot.id);
        if (this.isolated && identity !== null) {
          await chown(
            join(slot.directories.network as string, 'server'),
            process.getuid?.() ?? 0,
            process.getgid?.() ?? 0,
          );
        }
        return;
      }
      await sleep(50);
    }
    killProcessGroup(child.pid);
    throw new DressageError({
      code: 'deadline_exceeded',
      message: `slot ${slot.id}: the blackbox server did not become healthy on port ${port}`,
    });
  }

  private async stopProcesses(slot: Slot): Promise<void> {
    const children = [...slot.running, ...(slot.server ? [slot.server] : [])];
    slot.server = null;
    slot.token = null;
    const pipes = slot.pipes;
    slot.pipes = [];
    await Promise.all(pipes.map((pipe) => pipe.close()));
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('close', () => resolve());
            killProcessGroup(child.pid, 'SIGKILL');
            setTimeout(resolve, 5000).unref();
          }),
      ),
    );
    slot.running.clear();
  }

  private track(work: Promise<void>): void {
    this.removals.add(work);
    void work.finally(() => this.removals.delete(work));
  }

  private async reset(slot: Slot): Promise<void> {
    const generation = slot.generation;
    try {
      slot.state = 'resetting';
      await this.stopProcesses(slot);
      // Move aside first so a new lease never sees a half-deleted tree, then delete.
      const trash = join(this.baseDir, 'trash', `${slot.id}-${generation}-${randomBytes(4).toString('hex')}`);
      await mkdir(dirname(trash), { recursive: true });
      // A quota tmpfs goes with its contents; the next lease gets a fresh one.
      await this.unmountQuota(slot);
      await rename(slot.directories.root, trash).catch(() => undefined);
      this.track(rm(trash, { recursive: true, force: true, maxRetries: 3 }).catch(() => undefined));
      if (slot.generation !== generation || this.stopped) return;
      slot.generation += 1;
      slot.state = 'restarting';
      await this.createDirectories(slot);
      if (this.mode === 'blackbox') await this.startServer(slot);
      slot.state = 'ready';
      slot.error = null;
    } catch (error) {
      slot.state = 'failed';
      slot.error = error instanceof Error ? error.message : String(error);
    } finally {
      this.persistState();
      this.notify();
    }
  }

  /** One pass of the health loop: expire leases, probe servers, restart failed slots. */
  async checkHealth(): Promise<void> {
    if (this.stopped) return;
    const now = Date.now();
    for (const lease of [...this.leases.values()]) {
      if (lease.expiresAt !== null && lease.expiresAt <= now) await this.release(lease.trajectoryId);
    }
    for (const slot of this.slots) {
      if (slot.state === 'failed' && slot.failures < 5) {
        slot.state = 'releasing';
        this.track(this.reset(slot));
        continue;
      }
      if (this.mode !== 'blackbox') continue;
      if (slot.state !== 'ready' && slot.state !== 'leased') continue;
      const healthy = await probeHealth(`http://127.0.0.1:${this.portOf(slot)}/health`, 2000);
      if (healthy) continue;
      if (slot.state === 'ready') {
        slot.state = 'dead';
        this.track(this.reset(slot));
      } else {
        slot.state = 'lost';
        slot.error = 'the slot server stopped answering while leased';
      }
    }
    this.persistState();
  }

  /** A snapshot of every slot. */
  status(): PoolStatus {
    const counts: Partial<Record<SlotState, number>> = {};
    for (const slot of this.slots) counts[slot.state] = (counts[slot.state] ?? 0) + 1;
    return {
      pid: process.pid,
      mode: this.mode,
      baseDir: this.baseDir,
      slots: this.slots.map((slot) => ({
        slotId: slot.id,
        state: slot.state,
        generation: slot.generation,
        trajectoryId: slot.lease?.trajectoryId ?? null,
        port: this.portOf(slot),
        error: slot.error,
      })),
      counts,
      limits: this.cgroups.support,
      leases: this.leases.size,
    };
  }

  private persistState(): void {
    if (this.options.writeStateFile === false || !this.started) return;
    const file = join(this.baseDir, 'pool.json');
    const text = `${JSON.stringify({ ...this.status(), updatedAt: new Date().toISOString() }, null, 2)}\n`;
    this.stateWrite = this.stateWrite
      .then(() => writeFile(`${file}.tmp`, text))
      .then(() => rename(`${file}.tmp`, file))
      .catch(() => undefined);
  }

  /** Kills every sandbox, releases every lease and removes the slot directories. */
  async stop(options: { keepDirectories?: boolean } = {}): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.healthTimer) clearInterval(this.healthTimer);
    this.notify();
    await Promise.allSettled([...this.pendingAcquires.values()]);
    this.leases.clear();
    await Promise.all(this.slots.map((slot) => this.stopProcesses(slot)));
    for (const slot of this.slots) {
      slot.state = 'empty';
      slot.lease = null;
    }
    this.cgroups.remove(this.slots.length);
    await Promise.all(this.slots.map((slot) => this.unmountQuota(slot)));
    await this.stateWrite;
    while (this.removals.size > 0) await Promise.all([...this.removals]);
    if (!options.keepDirectories) await rm(this.baseDir, { recursive: true, force: true, maxRetries: 3 });
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

/** Maps a caller's cwd onto the sandbox: relative paths are under the work dir. */
export function resolveSandboxCwd(cwd: string | undefined): string {
  if (cwd === undefined || cwd === '' || cwd === '.') return sandboxPaths.work;
  if (cwd.startsWith('/')) return cwd;
  return `${sandboxPaths.work}/${cwd}`;
}

/** GET `url`; true when it answers below 500 within `timeoutMs`. */
export async function probeHealth(url: string, timeoutMs: number): Promise<boolean> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    await response.arrayBuffer();
    return response.status < 500;
  } catch {
    return false;
  }
}
