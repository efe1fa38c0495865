import { existsSync, lstatSync, readlinkSync } from 'node:fs';
import { dirname } from 'node:path';

/** Paths inside every sandbox. */
export const sandboxPaths = {
  home: '/home/blackbox',
  work: '/workspace',
  runtime: '/workspace_sandbox/blackbox_server_runtime',
  tmp: '/tmp',
  /** The slot's sockets to and from the host (a slot in its own network namespace). */
  network: '/workspace_sandbox/network',
} as const;

/** The host directories of one slot, bound writable into the sandbox. */
export interface SlotDirectories {
  home: string;
  work: string;
  runtime: string;
  tmp: string;
  /** Bound at `sandboxPaths.network` when given: the unix sockets of a network-isolated slot. */
  network?: string;
}

/** Options of {@link buildBwrapArgs}. */
export interface BwrapOptions {
  /** Absolute path of the bwrap binary. Default `bwrap`. */
  bwrapPath?: string;
  directories: SlotDirectories;
  hostname: string;
  /** Host paths bound read-only at the same path (the system, tool installs, the server's code). */
  readOnlyMounts: readonly string[];
  /** A private PID namespace: the sandbox sees only its own processes and dies as one. Default true. */
  unsharePid?: boolean;
  /** A private network namespace with only loopback: no egress, no host ports. Default false. */
  unshareNet?: boolean;
  /** uid/gid inside the user namespace. Default 1000. Ignored with {@link BwrapOptions.hostIdentity}. */
  uid?: number;
  gid?: number;
  /**
   * Run the sandboxed command as this unprivileged host uid/gid, with no capabilities and no
   * supplementary groups. For callers running as root: a user namespace started by root maps the
   * sandbox user to host root, who owns root-only files such as /etc/shadow. bwrap then runs
   * privileged (it can bind any path root can read) and `setpriv` drops to the identity before the
   * command starts. Mount points it creates are made traversable (0755) for that identity.
   */
  hostIdentity?: HostIdentity;
  /** Single files bound read-only over the system binds, as `[host path, sandbox path]`. */
  readOnlyFiles?: readonly (readonly [string, string])[];
  env: Record<string, string>;
  /** Working directory inside the sandbox. Default the work dir. */
  cwd?: string;
  extraArgs?: readonly string[];
  /**
   * A descriptor the bwrap process inherits holding a seccomp program (see
   * {@link userNamespaceSeccompProgram}); bwrap installs it just before the command starts.
   */
  seccompFd?: number;
  /**
   * A descriptor the bwrap process inherits, open for writing: bwrap reports the sandbox's pid there
   * (`--info-fd`), which a caller needs to kill a sandbox that outlived bwrap (see `SandboxProcess`).
   */
  infoFd?: number;
}

/** An unprivileged host identity a sandbox runs as (see {@link BwrapOptions.hostIdentity}). */
export interface HostIdentity {
  uid: number;
  gid: number;
  /** The `setpriv` binary (util-linux), bound into the sandbox with the system. Default /usr/bin/setpriv. */
  setprivPath?: string;
}

/** The system directories bound read-only by default (those that exist here). */
export const defaultSystemMounts: readonly string[] = [
  '/usr',
  '/bin',
  '/sbin',
  '/lib',
  '/lib64',
  '/lib32',
  '/etc',
  '/opt',
];

// Merged-/usr systems make /bin a symlink; binding it would follow the link, so recreate the link
// inside instead (the target is bound on its own).
function mountArgs(path: string): string[] {
  if (!existsSync(path)) return [];
  const stat = lstatSync(path);
  if (stat.isSymbolicLink()) return ['--symlink', readlinkSync(path), path];
  return ['--ro-bind', path, path];
}

/**
 * The argv of a bwrap invocation: a user namespace mapping to an unprivileged uid, private IPC and
 * UTS (and by default PID) namespaces, a new session (no terminal injection), death with the parent,
 * the read-only system binds, and the slot's home, work, runtime and tmp dirs bound writable.
 * Everything else on the host is invisible. `command` follows `--`.
 */
export function buildBwrapArgs(options: BwrapOptions, command: readonly string[]): string[] {
  const unsharePid = options.unsharePid ?? true;
  const identity = options.hostIdentity;
  const user = identity
    ? // Privileged bwrap keeps only the two capabilities setpriv needs to drop to the identity.
      ['--cap-add', 'CAP_SETUID', '--cap-add', 'CAP_SETGID']
    : ['--unshare-user', '--uid', String(options.uid ?? 1000), '--gid', String(options.gid ?? 1000)];
  const args = [
    options.bwrapPath ?? 'bwrap',
    ...user,
    '--unshare-ipc',
    '--unshare-uts',
    '--hostname',
    options.hostname,
    '--new-session',
    '--die-with-parent',
  ];
  if (unsharePid) args.push('--unshare-pid');
  if (options.unshareNet) args.push('--unshare-net');
  const system = [...new Set(options.readOnlyMounts.filter((path) => defaultSystemMounts.includes(path)))];
  const others = [...new Set(options.readOnlyMounts.filter((path) => !defaultSystemMounts.includes(path)))];
  // Privileged bwrap creates missing parents of mount points as 0700 root directories, which the
  // dropped identity could not traverse: create them 0755 first.
  const ensured = new Set<string>();
  const parentsOf = (destination: string) => {
    if (!identity) return;
    const parents: string[] = [];
    for (let parent = dirname(destination); parent !== '/' && parent !== '.'; parent = dirname(parent)) {
      parents.unshift(parent);
    }
    for (const parent of parents) {
      if (ensured.has(parent)) continue;
      ensured.add(parent);
      args.push('--perms', '0755', '--dir', parent);
    }
  };
  const mount = (path: string) => {
    parentsOf(path);
    args.push(...mountArgs(path));
  };
  for (const path of system) mount(path);
  for (const [source, destination] of options.readOnlyFiles ?? []) {
    parentsOf(destination);
    args.push('--ro-bind', source, destination);
  }
  args.push('--dev', '/dev');
  // A fresh /proc only shows the sandbox's own processes; without a PID namespace the host's /proc is
  // shared read-only (what bwrap allows there).
  if (unsharePid) args.push('--proc', '/proc');
  else args.push('--ro-bind', '/proc', '/proc');
  args.push('--tmpfs', '/run');
  const { directories } = options;
  for (const [source, destination] of [
    [directories.home, sandboxPaths.home],
    [directories.work, sandboxPaths.work],
    [directories.runtime, sandboxPaths.runtime],
    [directories.tmp, sandboxPaths.tmp],
    ...(directories.network === undefined ? [] : [[directories.network, sandboxPaths.network] as const]),
  ] as const) {
    parentsOf(destination);
    args.push('--bind', source, destination);
  }
  // Extra read-only mounts go on top of the slot directories: a checkout under /tmp (as many CI
  // runners use) must stay visible through the slot's private /tmp.
  for (const path of others) mount(path);
  // The root itself is a tmpfs bwrap made; freeze it so nothing outside the binds is writable.
  args.push('--remount-ro', '/');
  args.push('--clearenv');
  for (const [key, value] of Object.entries(options.env)) args.push('--setenv', key, value);
  args.push('--chdir', options.cwd ?? sandboxPaths.work);
  if (options.extraArgs) args.push(...options.extraArgs);
  if (options.seccompFd !== undefined) args.push('--seccomp', String(options.seccompFd));
  if (options.infoFd !== undefined) args.push('--info-fd', String(options.infoFd));
  args.push('--');
  if (identity) {
    args.push(
      identity.setprivPath ?? '/usr/bin/setpriv',
      `--reuid=${identity.uid}`,
      `--regid=${identity.gid}`,
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      '--',
    );
  }
  args.push(...command);
  return args;
}

/** The environment every sandboxed process starts with (before the caller's additions). */
export function sandboxBaseEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin',
    HOME: sandboxPaths.home,
    USER: 'blackbox',
    LANG: 'C.UTF-8',
    TMPDIR: '/tmp',
    XDG_CONFIG_HOME: `${sandboxPaths.home}/.config`,
    XDG_CACHE_HOME: `${sandboxPaths.home}/.cache`,
    XDG_DATA_HOME: `${sandboxPaths.home}/.local/share`,
    XDG_STATE_HOME: `${sandboxPaths.home}/.local/state`,
    CUDA_VISIBLE_DEVICES: '',
    NVIDIA_VISIBLE_DEVICES: 'void',
    ...extra,
  };
}

// Classic BPF over `struct seccomp_data` (nr at 0, arch at 4, args[0] at 16, little-endian).
const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JGE_K = 0x35;
const BPF_JSET_K = 0x45;
const BPF_RET_K = 0x06;
const SECCOMP_RET_ALLOW = 0x7fff0000;
const SECCOMP_RET_ERRNO = 0x00050000;
const EPERM = 1;
const ENOSYS = 38;
const CLONE_NEWUSER = 0x10000000;
const X32_SYSCALL_BIT = 0x40000000;

const syscallTables: Partial<
  Record<string, { audit: number; unshare: number; clone: number; clone3: number }>
> = {
  x64: { audit: 0xc000003e, unshare: 272, clone: 56, clone3: 435 },
  arm64: { audit: 0xc00000b7, unshare: 97, clone: 220, clone3: 435 },
};

/**
 * A seccomp program (the bytes of a `struct sock_filter` array, for bwrap's `--seccomp`) that keeps
 * a sandbox from creating user namespaces: `unshare` and `clone` with `CLONE_NEWUSER` fail with
 * EPERM. A sandbox has no use for one, and inside one it would hold every capability over its own
 * namespaces, the first step of most container escapes. `clone3`, whose flags a classic filter
 * cannot read, fails with ENOSYS, and the C library falls back to `clone`; system calls of another
 * ABI (32-bit, x32) fail with ENOSYS too, as they would bypass the checks. Null on an architecture
 * this table does not know.
 */
export function userNamespaceSeccompProgram(arch: string = process.arch): Buffer | null {
  const table = syscallTables[arch];
  if (table === undefined) return null;
  const program: Array<[number, number, number, number]> = [
    /* 0 */ [BPF_LD_W_ABS, 0, 0, 4],
    /* 1 */ [BPF_JEQ_K, 0, 9, table.audit], // another ABI: ENOSYS
    /* 2 */ [BPF_LD_W_ABS, 0, 0, 0],
    /* 3 */ [BPF_JGE_K, 7, 0, X32_SYSCALL_BIT], // x32: ENOSYS
    /* 4 */ [BPF_JEQ_K, 6, 0, table.clone3], // ENOSYS
    /* 5 */ [BPF_JEQ_K, 1, 0, table.unshare],
    /* 6 */ [BPF_JEQ_K, 0, 2, table.clone],
    /* 7 */ [BPF_LD_W_ABS, 0, 0, 16], // flags: args[0], low word
    /* 8 */ [BPF_JSET_K, 1, 0, CLONE_NEWUSER],
    /* 9 */ [BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW],
    /* 10 */ [BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM],
    /* 11 */ [BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS],
  ];
  const bytes = Buffer.alloc(program.length * 8);
  program.forEach(([code, jt, jf, k], index) => {
    bytes.writeUInt16LE(code, index * 8);
    bytes.writeUInt8(jt, index * 8 + 2);
    bytes.writeUInt8(jf, index * 8 + 3);
    bytes.writeUInt32LE(k >>> 0, index * 8 + 4);
  });
  return bytes;
}
