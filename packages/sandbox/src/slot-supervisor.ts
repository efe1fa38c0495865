import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { isLoopbackAddress, sleep } from '@dressage/protocol/internal';
import {
  buildBwrapArgs,
  sandboxBaseEnv,
  sandboxPaths,
  userNamespaceSeccompProgram,
} from './bwrap-command.js';
import { type ProcessGroupResult, runProcessGroup } from './process-group.js';
import { type LimitSupport, type ResourceLimits, SlotCgroups } from './resource-limits.js';
import { bwrapInfoFd, SandboxProcess } from './sandbox-process.js';
import type { SlotFiles, SlotHandle } from './slot-files.js';
import { startSocketPipe } from './socket-pipe.js';
import { startUpstreamGate } from './upstream-gate.js';

// The descriptor bwrap reads the slot's seccomp program from.
const SECCOMP_FD = 9;

/** The server every slot of a `blackbox` pool runs inside its sandbox. */
export interface SlotServer {
  /** Its command line, run inside the sandbox. */
  command: readonly string[];
  /** Host directories it needs read-only (its install), added to the pool's read-only binds. */
  readOnlyMounts?: readonly string[];
  /**
   * A route the pool POSTs (with the slot's token) when a lease ends, instead of restarting the
   * server: a 2xx answer says the server has dropped everything of the lease and keeps running (with
   * whatever it chose to keep warm); the pool then kills the lease's commands and empties the slot's
   * work, home and tmp directories in place. Any other answer, or none within 30 s, restarts the slot
   * as without it.
   */
  recyclePath?: string;
}

/** Options of {@link LocalBwrapPool.runInSlot}. */
export interface SlotCommandOptions {
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  stdin?: string;
  signal?: AbortSignal;
}

/** Options of {@link SlotSupervisor}. */
export interface SlotSupervisorOptions {
  files: SlotFiles;
  /** The host port slot `slotId` is reached at. */
  portOf: (slotId: number) => number;
  /** The server each slot runs, or null (`command_only`). */
  server: SlotServer | null;
  /** Read-only binds of every sandbox. */
  readOnlyMounts: readonly string[];
  /** Blackbox slots in their own network namespace, reached through unix sockets. */
  isolated: boolean;
  /** A network namespace per sandbox (for `command_only`: no network at all). */
  unshareNet: boolean;
  unsharePid: boolean;
  /** The recording proxy network-isolated slots may reach. */
  upstream: { host: string; port: number } | null;
  upstreamApiKey?: string;
  advertiseHost: string;
  startupTimeoutSeconds: number;
  env: Record<string, string>;
  limits: ResourceLimits;
  bwrapPath?: string;
}

interface SlotProcesses {
  server: SandboxProcess | null;
  /** Bearer token of the running server; a new one at every server start. */
  token: string | null;
  /** The host ends of a network-isolated slot: the server's port and the upstream socket. */
  pipes: { close(): Promise<void> }[];
  running: Set<SandboxProcess>;
  /** Aborted (and replaced) when the slot is recycled: every command of the ended lease dies. */
  commands: AbortController;
}

/**
 * The process side of a pool's slots: the bwrap command line of each sandbox (binds, identity,
 * seccomp filter, cgroups), commands run in them, the slot server with its token and socket pipes,
 * and killing all of it.
 */
export class SlotSupervisor {
  readonly #options: SlotSupervisorOptions;
  readonly #cgroups: SlotCgroups;
  readonly #processes = new Map<number, SlotProcesses>();
  /** The seccomp program every sandbox starts under (null where none is known for this machine). */
  #seccompProgramFile: string | null | undefined;

  constructor(options: SlotSupervisorOptions) {
    this.#options = options;
    this.#cgroups = new SlotCgroups(
      `dressage-${process.pid}-${randomBytes(3).toString('hex')}`,
      options.limits,
    );
  }

  /** Which resource limits apply here. */
  get limitSupport(): LimitSupport {
    return this.#cgroups.support;
  }

  /** The bearer token of the slot's running server, or null. */
  tokenOf(slotId: number): string | null {
    return this.#processes.get(slotId)?.token ?? null;
  }

  /**
   * Runs `/bin/sh -lc <cmd>` in a fresh sandbox over the slot's directories. The sandbox is its own
   * process group (and PID namespace): on timeout or abort everything it started is killed.
   */
  run(slot: SlotHandle, cmd: string, options: SlotCommandOptions = {}): Promise<ProcessGroupResult> {
    const processes = this.#processesOf(slot.id);
    const argv = this.#argv(slot, ['/bin/sh', '-lc', cmd], options.env ?? {}, resolveSandboxCwd(options.cwd));
    // The slot's command signal too: a recycle kills commands that have not even spawned yet.
    const lease = processes.commands.signal;
    return runProcessGroup(argv, {
      timeoutMs: options.timeoutMs,
      stdin: options.stdin,
      signal: options.signal ? AbortSignal.any([options.signal, lease]) : lease,
      bwrapInfo: true,
      onSpawn: (command) => {
        processes.running.add(command);
        command.child.once('close', () => processes.running.delete(command));
      },
    });
  }

  /**
   * Starts the slot's server and waits until it answers `/health`. `sessionOf` names the session the
   * slot's lease pins its upstream to, asked per request (the slot serves one lease after another).
   */
  async startServer(slot: SlotHandle, sessionOf: () => string | null): Promise<void> {
    const options = this.#options;
    const server = options.server as SlotServer;
    const processes = this.#processesOf(slot.id);
    const port = options.portOf(slot.id);
    // Leases advertised beyond this machine need the server on every interface; the token guards it.
    const listenHost = isLoopbackAddress(options.advertiseHost) ? '127.0.0.1' : '0.0.0.0';
    const network: Record<string, string> = {};
    if (options.isolated) {
      const sockets = await options.files.createNetworkDirectory(slot);
      const identity = options.files.hostIdentityOf(slot.id) ?? undefined;
      network.BBS_SOCKET = `${sandboxPaths.network}/server/server.sock`;
      if (options.upstream !== null) {
        processes.pipes.push(
          await startUpstreamGate({
            listen: { path: sockets.upstream },
            target: options.upstream,
            owner: identity,
            sessionOf,
            apiKey: options.upstreamApiKey,
          }),
        );
        network.BBS_UPSTREAM_SOCKET = `${sandboxPaths.network}/upstream.sock`;
      }
      processes.pipes.push(
        await startSocketPipe({ listen: { host: listenHost, port }, target: { path: sockets.server } }),
      );
    }
    const argv = this.#argv(slot, server.command, {
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
    const child = spawn(command as string, args, {
      detached: true,
      stdio: ['pipe', 'ignore', 'pipe', 'pipe'],
    });
    const sandbox = new SandboxProcess(child);
    child.stdin?.on('error', () => {});
    child.stdin?.end(`${token}\n`);
    processes.token = token;
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString('utf8')).slice(-4000);
    });
    child.on('error', () => {});
    processes.server = sandbox;
    const deadline = Date.now() + options.startupTimeoutSeconds * 1000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new DressageError({
          code: 'unavailable',
          message: `slot ${slot.id}: the blackbox server exited during startup: ${stderr.trim().slice(-500)}`,
        });
      }
      if (await probeHealth(`http://127.0.0.1:${port}/health`, 2000)) {
        if (options.isolated) await options.files.reclaimServerDirectory(slot);
        return;
      }
      await sleep(50);
    }
    sandbox.kill();
    throw new DressageError({
      code: 'deadline_exceeded',
      message: `slot ${slot.id}: the blackbox server did not become healthy on port ${port}`,
    });
  }

  /**
   * Asks the slot's running server to drop the ended lease (its {@link SlotServer.recyclePath}) and
   * kills the lease's commands. False when the server has no such route, is not running, or did not
   * answer 2xx: the slot must then be restarted.
   */
  async recycle(slotId: number): Promise<boolean> {
    const path = this.#options.server?.recyclePath;
    const processes = this.#processesOf(slotId);
    const server = processes.server;
    if (path === undefined || server === null || server.exited) return false;
    processes.commands.abort();
    processes.commands = new AbortController();
    await this.#killAll([...processes.running]);
    processes.running.clear();
    try {
      const response = await fetch(`http://127.0.0.1:${this.#options.portOf(slotId)}${path}`, {
        method: 'POST',
        headers: processes.token === null ? {} : { authorization: `Bearer ${processes.token}` },
        signal: AbortSignal.timeout(30_000),
      });
      await response.arrayBuffer().catch(() => undefined);
      return response.ok;
    } catch {
      return false;
    }
  }

  /** Kills the slot's server and commands and closes its pipes. */
  async stop(slotId: number): Promise<void> {
    const processes = this.#processesOf(slotId);
    processes.commands.abort();
    processes.commands = new AbortController();
    const children = [...processes.running, ...(processes.server ? [processes.server] : [])];
    processes.server = null;
    processes.token = null;
    const pipes = processes.pipes;
    processes.pipes = [];
    await Promise.all(pipes.map((pipe) => pipe.close()));
    await this.#killAll(children);
    processes.running.clear();
  }

  async #killAll(sandboxes: readonly SandboxProcess[]): Promise<void> {
    await Promise.all(
      sandboxes.map(
        (sandbox) =>
          new Promise<void>((resolve) => {
            // Not only exited: a sandbox that outlived bwrap keeps the pipes open, and is killed too.
            if (sandbox.closed) return resolve();
            sandbox.child.once('close', () => resolve());
            sandbox.kill('SIGKILL');
            setTimeout(resolve, 5000).unref();
          }),
      ),
    );
  }

  /** Removes the slots' cgroups (after {@link stop}). */
  removeCgroups(slotCount: number): void {
    this.#cgroups.remove(slotCount);
  }

  #processesOf(slotId: number): SlotProcesses {
    let processes = this.#processes.get(slotId);
    if (processes === undefined) {
      processes = {
        server: null,
        token: null,
        pipes: [],
        running: new Set(),
        commands: new AbortController(),
      };
      this.#processes.set(slotId, processes);
    }
    return processes;
  }

  // No user namespaces inside a slot: the filter bwrap installs before the command starts, written
  // once into the pool's directory.
  get #seccompProgramPath(): string | null {
    if (this.#seccompProgramFile === undefined) {
      const program = userNamespaceSeccompProgram();
      if (program === null) this.#seccompProgramFile = null;
      else {
        const baseDir = this.#options.files.baseDir;
        const path = join(baseDir, 'no-user-namespaces.bpf');
        mkdirSync(baseDir, { recursive: true });
        writeFileSync(path, program, { mode: 0o644 });
        this.#seccompProgramFile = path;
      }
    }
    return this.#seccompProgramFile;
  }

  #argv(slot: SlotHandle, command: readonly string[], env: Record<string, string>, cwd?: string): string[] {
    const options = this.#options;
    const identity = options.files.hostIdentityOf(slot.id);
    const seccomp = this.#seccompProgramPath;
    const argv = buildBwrapArgs(
      {
        bwrapPath: options.bwrapPath,
        hostIdentity: identity ?? undefined,
        readOnlyFiles: identity === null ? [] : options.files.identityFiles(slot.id),
        directories: slot.directories,
        hostname: `dressage-bb-${String(slot.id).padStart(4, '0')}`,
        readOnlyMounts: options.readOnlyMounts,
        unsharePid: options.unsharePid,
        unshareNet: options.unshareNet,
        env: sandboxBaseEnv({
          DRESSAGE_BLACKBOX_SLOT_ID: String(slot.id),
          DRESSAGE_BLACKBOX_SLOT_GENERATION: String(slot.generation),
          DRESSAGE_BLACKBOX_SLOT_PORT: String(options.portOf(slot.id)),
          ...options.env,
          ...env,
        }),
        cwd,
        seccompFd: seccomp === null ? undefined : SECCOMP_FD,
        infoFd: bwrapInfoFd,
      },
      command,
    );
    // bwrap reads the filter from a descriptor: a shell opens the file as that descriptor for it.
    const withFilter =
      seccomp === null ? argv : ['/bin/sh', '-c', `exec "$@" ${SECCOMP_FD}<"$0"`, seccomp, ...argv];
    return this.#cgroups.wrap(slot.id, withFilter);
  }
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
