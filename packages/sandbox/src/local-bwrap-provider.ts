import { appendFile, mkdir, readFile, realpath, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, normalize, relative, sep } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { type SlotDirectories, sandboxPaths } from './bwrap-command.js';
import { LocalBwrapPool, type LocalBwrapPoolOptions, type PoolLease } from './local-bwrap-pool.js';
import type {
  CommandResult,
  RunCommandOptions,
  SandboxLease,
  SandboxProvider,
  SandboxSpec,
} from './types.js';

/** Quotes one argument for `/bin/sh`. */
export function shellQuote(argument: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(argument)) return argument;
  return `'${argument.replaceAll("'", "'\\''")}'`;
}

/** Joins an argv into one shell command line. */
export function shellJoin(argv: readonly string[]): string {
  return argv.map(shellQuote).join(' ');
}

function inside(root: string, path: string): boolean {
  const rest = relative(root, path);
  return rest === '' || (!rest.startsWith(`..${sep}`) && rest !== '..' && !isAbsolute(rest));
}

/**
 * Maps a sandbox path (absolute under `/workspace`, `/home/blackbox` or `/tmp`, or relative to the
 * work dir) to the host path of the slot. Anything else is refused.
 */
export function hostPathOf(directories: SlotDirectories, sandboxPath: string): string {
  const absolute = normalize(isAbsolute(sandboxPath) ? sandboxPath : join(sandboxPaths.work, sandboxPath));
  const roots: [string, string][] = [
    [sandboxPaths.work, directories.work],
    [sandboxPaths.home, directories.home],
    [sandboxPaths.runtime, directories.runtime],
    [sandboxPaths.tmp, directories.tmp],
  ];
  for (const [inner, outer] of roots) {
    if (inside(inner, absolute)) return join(outer, relative(inner, absolute));
  }
  throw new DressageError({
    code: 'permission_denied',
    message: `${sandboxPath} is outside the sandbox's writable directories`,
    details: { path: sandboxPath },
  });
}

// A sandboxed process may plant a symlink pointing at a host file; resolve it and refuse anything
// that leaves the slot before the host (running with more rights) touches it.
async function confine(directories: SlotDirectories, hostPath: string, mustExist: boolean): Promise<string> {
  const roots = await Promise.all(
    [directories.work, directories.home, directories.runtime, directories.tmp].map((dir) => realpath(dir)),
  );
  let resolved: string;
  try {
    resolved = await realpath(hostPath);
  } catch (error) {
    if (mustExist) throw error;
    // Resolve the deepest ancestor that exists; the missing tail cannot hold a symlink yet.
    let existing = dirname(hostPath);
    while (true) {
      try {
        resolved = join(await realpath(existing), relative(existing, hostPath));
        break;
      } catch {
        const parent = dirname(existing);
        if (parent === existing) throw error;
        existing = parent;
      }
    }
  }
  if (!roots.some((root) => inside(root, resolved))) {
    throw new DressageError({
      code: 'permission_denied',
      message: 'the path resolves outside the sandbox (symlink escape refused)',
      details: { path: hostPath },
    });
  }
  return resolved;
}

/** Options of {@link LocalBwrapProvider}. */
export interface LocalBwrapProviderOptions extends LocalBwrapPoolOptions {
  /** An existing pool to lease from (the provider then does not own it). */
  pool?: LocalBwrapPool;
}

/**
 * The `local_bwrap` sandbox provider: leases slots of a {@link LocalBwrapPool} on this machine.
 * Commands run in a fresh bwrap sandbox over the slot's directories; file operations go straight to
 * the slot's host directories, confined to them.
 */
export class LocalBwrapProvider implements SandboxProvider {
  readonly name = 'local_bwrap';
  readonly pool: LocalBwrapPool;
  readonly #ownsPool: boolean;
  readonly #specs = new Map<string, SandboxSpec>();

  constructor(options: LocalBwrapProviderOptions = {}) {
    this.pool = options.pool ?? new LocalBwrapPool(options);
    this.#ownsPool = options.pool === undefined;
  }

  async create(spec: SandboxSpec): Promise<SandboxLease> {
    const wanted = spec.metadata?.paddock_mode;
    if (wanted === 'whitebox' && this.pool.mode === 'blackbox') {
      throw new DressageError({
        code: 'failed_precondition',
        message: 'a whitebox paddock needs a command_only pool, but this pool runs in blackbox mode',
      });
    }
    if (wanted === 'blackbox' && this.pool.mode !== 'blackbox') {
      throw new DressageError({
        code: 'failed_precondition',
        message: 'a blackbox paddock needs a blackbox pool, but this pool runs in command_only mode',
      });
    }
    const lease = await this.pool.acquire(spec.trajectoryId, { sessionId: spec.sessionId });
    this.#specs.set(spec.trajectoryId, spec);
    return this.#toSandboxLease(lease, spec);
  }

  #toSandboxLease(lease: PoolLease, spec: SandboxSpec): SandboxLease {
    const endpoints: SandboxLease['endpoints'] = {};
    if (lease.poolMode === 'blackbox') {
      endpoints.blackbox = { url: lease.sandboxUrl, headers: { ...lease.headers } };
      for (const service of spec.services ?? [])
        endpoints[service.name] = { url: lease.sandboxUrl, headers: { ...lease.headers } };
    }
    return {
      trajectoryId: lease.trajectoryId,
      provider: this.name,
      sandboxId: lease.leaseId,
      endpoints,
      capabilities: lease.poolMode === 'blackbox' ? ['command', 'file', 'public_url'] : ['command', 'file'],
      metadata: {
        lease_id: lease.leaseId,
        slot_id: lease.slotId,
        port: lease.port,
        sandbox_url: lease.sandboxUrl,
        generation: lease.generation,
        pool_mode: lease.poolMode,
        session_id: lease.sessionId,
        status: 'ready',
      },
    };
  }

  #poolLease(lease: SandboxLease): PoolLease {
    const current = this.pool.leaseOf(lease.trajectoryId);
    if (!current || current.leaseId !== lease.sandboxId) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `the sandbox of trajectory ${lease.trajectoryId} is no longer leased`,
      });
    }
    return current;
  }

  async terminate(leaseOrTrajectoryId: SandboxLease | string): Promise<void> {
    const trajectoryId =
      typeof leaseOrTrajectoryId === 'string' ? leaseOrTrajectoryId : leaseOrTrajectoryId.trajectoryId;
    this.#specs.delete(trajectoryId);
    await this.pool.release(trajectoryId);
  }

  async getPublicUrl(lease: SandboxLease): Promise<string> {
    const current = this.#poolLease(lease);
    if (current.poolMode !== 'blackbox') {
      throw new DressageError({ code: 'unimplemented', message: 'command_only slots expose no public url' });
    }
    return current.sandboxUrl;
  }

  async runCommand(
    lease: SandboxLease,
    cmd: string | readonly string[],
    options: RunCommandOptions = {},
  ): Promise<CommandResult> {
    const line = typeof cmd === 'string' ? cmd : shellJoin(cmd);
    const spec = this.#specs.get(lease.trajectoryId);
    const result = await this.pool.runInSlot(this.#poolLease(lease), line, {
      cwd: options.cwd,
      env: { ...spec?.env, ...options.env },
      timeoutMs: options.timeoutSeconds === undefined ? undefined : options.timeoutSeconds * 1000,
      stdin: options.stdin,
    });
    return {
      cmd: line,
      stdout: result.stdout,
      stderr: result.stderr,
      returncode: result.timedOut ? -1 : result.returncode,
      timedOut: result.timedOut,
      metadata: { duration_seconds: result.durationSeconds, signal: result.signal },
    };
  }

  async readFile(lease: SandboxLease, path: string): Promise<Buffer> {
    const directories = this.pool.directoriesOf(this.#poolLease(lease));
    return readFile(await confine(directories, hostPathOf(directories, path), true));
  }

  async writeFile(
    lease: SandboxLease,
    path: string,
    content: string | Uint8Array,
    options: { append?: boolean } = {},
  ): Promise<void> {
    const poolLease = this.#poolLease(lease);
    const directories = this.pool.directoriesOf(poolLease);
    const target = hostPathOf(directories, path);
    await confine(directories, target, false);
    const firstCreated = await mkdir(dirname(target), { recursive: true });
    const confined = await confine(directories, target, false);
    if (options.append) await appendFile(confined, content);
    else await writeFile(confined, content);
    // Written by the host (root, perhaps): hand the new directories and the file to the sandbox user.
    const created: string[] = [];
    if (firstCreated !== undefined) {
      for (let dir = dirname(target); dir.startsWith(firstCreated); dir = dirname(dir)) {
        created.push(dir);
        if (dir === firstCreated) break;
      }
    }
    await this.pool.giveToSlot(poolLease, [...created, confined]);
  }

  /** Stops the pool when this provider created it. */
  async close(): Promise<void> {
    if (this.#ownsPool) await this.pool.stop();
  }
}
