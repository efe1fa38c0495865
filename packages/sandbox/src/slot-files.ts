import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { DressageError } from '@dressage/protocol';
import { type HostIdentity, type SlotDirectories, sandboxPaths } from './bwrap-command.js';

const execFileAsync = promisify(execFile);

// What a coding task writes: a repository, its dependencies and build output.
const DEFAULT_DISK_LIMIT_BYTES = 4 * 1024 ** 3;

/** What the parts of a pool know of one slot: its number, its lease generation and its directories. */
export interface SlotHandle {
  readonly id: number;
  generation: number;
  readonly directories: SlotDirectories & { root: string };
}

/** Options of {@link SlotFiles}. */
export interface SlotFilesOptions {
  /** Slot dirs live in `<baseDir>/slots/<NNNN>/`. */
  baseDir: string;
  /** Bytes a slot may write in all; 0 disables. Default 4 GiB. */
  diskLimitBytes?: number;
  /** First host uid of the slots when running as root. Default 100000. */
  sandboxHostUid?: number;
  /** Slots get a `network/` directory for their unix sockets (network-isolated blackbox slots). */
  network: boolean;
}

/**
 * The file system side of a pool's slots: their directories (with a size-limited tmpfs as root), the
 * host identity each slot runs as, its `/etc/passwd` and `/etc/group`, the socket directory of a
 * network-isolated slot, and the wipe between leases.
 */
export class SlotFiles {
  readonly baseDir: string;
  readonly #diskLimitBytes: number;
  readonly #identityBase: number | null;
  readonly #network: boolean;
  readonly #quotaMounted = new Set<number>();
  readonly #removals = new Set<Promise<void>>();

  constructor(options: SlotFilesOptions) {
    this.baseDir = options.baseDir;
    this.#diskLimitBytes = options.diskLimitBytes ?? DEFAULT_DISK_LIMIT_BYTES;
    this.#network = options.network;
    this.#identityBase = process.getuid?.() === 0 ? (options.sandboxHostUid ?? 100_000) : null;
    if (this.#identityBase !== null && !existsSync('/usr/bin/setpriv')) {
      throw new DressageError({
        code: 'failed_precondition',
        message:
          'running as root, the pool drops sandboxes to an unprivileged uid with /usr/bin/setpriv (util-linux), which is missing',
      });
    }
  }

  /** The host directories of slot `slotId` (they exist once {@link SlotFiles.create} ran). */
  directoriesOf(slotId: number): SlotDirectories & { root: string } {
    const root = join(this.baseDir, 'slots', String(slotId).padStart(4, '0'));
    return {
      root,
      home: join(root, 'home'),
      work: join(root, 'work'),
      runtime: join(root, 'runtime'),
      tmp: join(root, 'tmp'),
      ...(this.#network ? { network: join(root, 'network') } : {}),
    };
  }

  /**
   * The host uid and gid slot `slotId` runs as, or null when the pool does not run as root (the
   * sandbox user is then the caller's own uid, through a user namespace).
   */
  hostIdentityOf(slotId: number): HostIdentity | null {
    if (this.#identityBase === null) return null;
    return { uid: this.#identityBase + slotId, gid: this.#identityBase + slotId };
  }

  /** Hands host paths to slot `slotId`'s identity. Nothing to do when not running as root. */
  async giveTo(slotId: number, paths: readonly string[]): Promise<void> {
    const identity = this.hostIdentityOf(slotId);
    if (identity === null) return;
    for (const path of paths) await chown(path, identity.uid, identity.gid);
  }

  /** The per-slot write quota in force (bytes), or null with the reason none applies. */
  get diskQuota(): { bytes: number | null; reason: string | null } {
    const bytes = this.#diskLimitBytes;
    if (bytes === 0) return { bytes: null, reason: 'diskLimitBytes is 0' };
    if (process.getuid?.() !== 0) return { bytes: null, reason: 'mounting a slot quota needs root' };
    return { bytes, reason: null };
  }

  /** Creates the slot's writable directories (under its quota), owned by the slot's identity. */
  async create(slot: SlotHandle): Promise<void> {
    await this.#mountQuota(slot);
    const { home, work, runtime, tmp } = slot.directories;
    const writable = [home, work, runtime, tmp];
    await Promise.all(writable.map((dir) => mkdir(dir, { recursive: true, mode: 0o755 })));
    const identity = this.hostIdentityOf(slot.id);
    if (identity === null) return;
    await Promise.all(writable.map((dir) => chown(dir, identity.uid, identity.gid)));
    await this.#writeIdentityFiles(slot.id, identity);
  }

  /**
   * The socket paths of a network-isolated slot. The network directory stays the pool's (the
   * sandbox cannot swap the upstream socket for one of its own); only its `server` subdirectory,
   * where the slot server creates its socket, is the slot's until {@link reclaimServerDirectory}.
   */
  async createNetworkDirectory(slot: SlotHandle): Promise<{ server: string; upstream: string }> {
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

  /**
   * The server's socket is bound: take its directory back, so that nothing in the slot (its agent)
   * can put a socket of its own in the server's place and be sent the slot's token.
   */
  async reclaimServerDirectory(slot: SlotHandle): Promise<void> {
    if (slot.directories.network === undefined || this.hostIdentityOf(slot.id) === null) return;
    await chown(join(slot.directories.network, 'server'), process.getuid?.() ?? 0, process.getgid?.() ?? 0);
  }

  /**
   * The slot's /etc/passwd and /etc/group as `[host path, sandbox path]` (written as root only): the
   * host's, plus the sandbox user under its host uid, so that programs asking who they are get an answer.
   */
  identityFiles(slotId: number): [string, string][] {
    const directory = join(this.baseDir, 'identity', String(slotId).padStart(4, '0'));
    return [
      [join(directory, 'passwd'), '/etc/passwd'],
      [join(directory, 'group'), '/etc/group'],
    ];
  }

  /**
   * Wipes the slot's directories: moved aside first, so that a new lease never sees a half-deleted
   * tree, then deleted in the background ({@link settled} waits for it). A quota tmpfs goes with its
   * contents; the next lease gets a fresh one.
   */
  async wipe(slot: SlotHandle): Promise<void> {
    const trash = join(
      this.baseDir,
      'trash',
      `${slot.id}-${slot.generation}-${randomBytes(4).toString('hex')}`,
    );
    await mkdir(dirname(trash), { recursive: true });
    await this.unmount(slot);
    await rename(slot.directories.root, trash).catch(() => undefined);
    const removal = rm(trash, { recursive: true, force: true, maxRetries: 3 }).catch(() => undefined);
    this.#removals.add(removal);
    void removal.finally(() => this.#removals.delete(removal));
  }

  /**
   * Empties the slot's work, home and tmp directories in place (their bind mounts in a running
   * sandbox stay valid), keeping its runtime directory: between two leases of a slot whose server
   * stays up. Throws when something cannot be removed (the slot must then be wiped and restarted).
   */
  async empty(slot: SlotHandle): Promise<void> {
    const { home, work, tmp } = slot.directories;
    for (const dir of [home, work, tmp]) {
      const entries = await readdir(dir);
      await Promise.all(entries.map((entry) => rm(join(dir, entry), { recursive: true, force: true })));
      const left = await readdir(dir);
      if (left.length > 0)
        throw new DressageError({
          code: 'internal',
          message: `slot ${slot.id}: ${dir} could not be emptied (${left.slice(0, 3).join(', ')})`,
        });
    }
  }

  /** Unmounts the slot's quota tmpfs, if it has one. */
  async unmount(slot: SlotHandle): Promise<void> {
    if (!this.#quotaMounted.has(slot.id)) return;
    // Lazy: a process that has not died yet cannot keep the mount (and the slot) busy.
    await execFileAsync('umount', ['--lazy', slot.directories.root]).catch(() => undefined);
    this.#quotaMounted.delete(slot.id);
  }

  /** Resolves when every background removal has finished. */
  async settled(): Promise<void> {
    while (this.#removals.size > 0) await Promise.all([...this.#removals]);
  }

  // The slot's directory as a tmpfs of the quota's size: the kernel refuses writes past it.
  async #mountQuota(slot: SlotHandle): Promise<void> {
    const { bytes } = this.diskQuota;
    if (bytes === null || this.#quotaMounted.has(slot.id)) return;
    await mkdir(slot.directories.root, { recursive: true, mode: 0o755 });
    await execFileAsync('mount', [
      '-t',
      'tmpfs',
      '-o',
      `size=${bytes},mode=0755`,
      'tmpfs',
      slot.directories.root,
    ]);
    this.#quotaMounted.add(slot.id);
  }

  async #writeIdentityFiles(slotId: number, identity: HostIdentity): Promise<void> {
    const [[passwd], [group]] = this.identityFiles(slotId) as [[string, string], [string, string]];
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
}
