import type { ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';

/**
 * The descriptor a spawned bwrap writes its `--info-fd` report to: the first one after stdin, stdout
 * and stderr (spawn it with a fourth `'pipe'`).
 */
export const bwrapInfoFd = 3;

/** Sends `signal` to the process group led by `pid`, ignoring a group that is already gone. */
export function killProcessGroup(pid: number | undefined, signal: NodeJS.Signals = 'SIGKILL'): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group already exited.
  }
}

function killProcess(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // ESRCH: already gone.
  }
}

/**
 * A spawned process group leader and, when the leader is bwrap run with `--info-fd 3`, the sandbox it
 * started. {@link kill} reaches both.
 *
 * Killing bwrap's group alone can leave the sandbox running: bwrap puts the sandbox in a session of
 * its own (`--new-session`: `setsid()`, bubblewrap.c:3544 at v0.11.1) before the sandbox arms its
 * `--die-with-parent` (`PR_SET_PDEATHSIG` in the namespace's init, bubblewrap.c:624, and in the command,
 * bubblewrap.c:3605). bwrap killed in between leaves a sandbox that lives on, holding the command's
 * pipes and the slot's files. bwrap reports the sandbox's pid (`"child-pid"`) before it lets the
 * sandbox past its setup (the report at bubblewrap.c:3190, the go-ahead at 3215), so a sandbox whose
 * pid is not known yet is still in bwrap's group, and one that left it is killed once its pid arrives.
 */
export class SandboxProcess {
  readonly child: ChildProcess;
  #sandboxPid: number | null = null;
  /** A kill asked for before bwrap reported the sandbox's pid. */
  #pendingSignal: NodeJS.Signals | null = null;
  #closed = false;

  constructor(child: ChildProcess) {
    this.child = child;
    child.once('close', () => {
      this.#closed = true;
    });
    const info = child.stdio[bwrapInfoFd] as Readable | null | undefined;
    if (info === null || info === undefined) return;
    let report = '';
    info.on('error', () => {});
    info.on('data', (chunk: Buffer) => {
      if (this.#sandboxPid !== null) return;
      report += chunk.toString('utf8');
      const match = /"child-pid"\s*:\s*(\d+)/.exec(report);
      if (match === null) return;
      this.#sandboxPid = Number(match[1]);
      if (this.#pendingSignal !== null) this.#killSandbox(this.#pendingSignal);
    });
  }

  /** The host pid of the sandbox (its PID namespace's init), once bwrap reported it. */
  get sandboxPid(): number | null {
    return this.#sandboxPid;
  }

  /** True once the leader has exited. */
  get exited(): boolean {
    return this.child.exitCode !== null || this.child.signalCode !== null;
  }

  /**
   * True once the leader has exited and its output pipes closed: nothing it started holds them. (A
   * sandbox that outlived bwrap keeps them open.)
   */
  get closed(): boolean {
    return this.#closed;
  }

  /** Kills the leader's process group and the sandbox (now, or as soon as its pid is known). */
  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    killProcessGroup(this.child.pid, signal);
    if (this.#sandboxPid === null) this.#pendingSignal = signal;
    else this.#killSandbox(signal);
  }

  #killSandbox(signal: NodeJS.Signals): void {
    const pid = this.#sandboxPid as number;
    // The sandbox leads its own session; in a PID namespace its pid is the namespace's init, whose
    // death takes every process of the namespace with it.
    killProcessGroup(pid, signal);
    killProcess(pid, signal);
  }
}
