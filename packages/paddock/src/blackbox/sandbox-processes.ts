import { readdir, readFile } from 'node:fs/promises';

interface ProcessEntry {
  pid: number;
  ppid: number;
  pgid: number;
}

// /proc/<pid>/stat: the command name is in parentheses and may hold spaces, so fields are counted
// after its closing one: state, ppid, pgrp.
async function readEntry(pid: number): Promise<ProcessEntry | null> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return {
      pid,
      ppid: Number(fields[1]),
      pgid: Number(fields[2]),
    };
  } catch {
    return null;
  }
}

async function listProcesses(): Promise<ProcessEntry[]> {
  const names = (await readdir('/proc')).filter((name) => /^\d+$/.test(name));
  const entries = await Promise.all(names.map((name) => readEntry(Number(name))));
  return entries.filter((entry): entry is ProcessEntry => entry !== null);
}

/**
 * True when this process runs in a PID namespace of its own sandbox: bwrap (`--unshare-pid`) is PID
 * 1. Only there is every other process one that the sandbox started.
 */
export async function inOwnPidNamespace(): Promise<boolean> {
  const init = await readFile('/proc/1/comm', 'utf8').catch(() => '');
  return init.trim() === 'bwrap';
}

/**
 * Kills (SIGKILL) every process of this sandbox's PID namespace but PID 1, this process and its
 * ancestors, and the members of `keepGroups` (a kept agent's process groups): what a sample left
 * running (a background job of the agent's shell) must not see the next sample. Returns the number
 * killed; nothing is done outside a PID namespace of its own ({@link inOwnPidNamespace}).
 */
export async function killStrayProcesses(keepGroups: readonly number[]): Promise<number> {
  if (!(await inOwnPidNamespace())) return 0;
  const processes = await listProcesses();
  const byPid = new Map(processes.map((entry) => [entry.pid, entry]));
  const keep = new Set<number>([1]);
  for (let pid: number | undefined = process.pid; pid !== undefined && pid > 0; ) {
    keep.add(pid);
    pid = byPid.get(pid)?.ppid;
  }
  let killed = 0;
  for (const entry of processes) {
    if (keep.has(entry.pid) || keepGroups.includes(entry.pgid)) continue;
    try {
      process.kill(entry.pid, 'SIGKILL');
      killed += 1;
    } catch {
      // Gone already.
    }
  }
  return killed;
}

/** Resident memory, in bytes, of every process in the process group `pgid` (VmRSS of each). */
export async function processGroupRssBytes(pgid: number): Promise<number> {
  let bytes = 0;
  for (const entry of await listProcesses()) {
    if (entry.pgid !== pgid) continue;
    const status = await readFile(`/proc/${entry.pid}/status`, 'utf8').catch(() => '');
    const kib = /^VmRSS:\s+(\d+) kB/m.exec(status);
    if (kib) bytes += Number(kib[1]) * 1024;
  }
  return bytes;
}
