import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Memory and process-count caps of one slot. */
export interface ResourceLimits {
  /** Bytes of memory (RSS + page cache) the slot may use. */
  memoryBytes?: number;
  /** Processes and threads the slot may hold at once. */
  maxProcesses?: number;
}

/** Which limits the machine let us apply, and why not the others. */
export interface LimitSupport {
  memory: boolean;
  processes: boolean;
  reason: string | null;
}

interface CgroupLayout {
  version: 1 | 2;
  memoryParent: string | null;
  pidsParent: string | null;
}

function ownCgroupPath(controller: string): string | null {
  try {
    for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
      const [, controllers, path] = line.split(':');
      if (controllers === undefined || path === undefined) continue;
      if (controllers.split(',').includes(controller) || (controller === '' && controllers === ''))
        return path;
    }
  } catch {
    return null;
  }
  return null;
}

function writable(path: string): boolean {
  const probe = join(path, `dressage-probe-${process.pid}`);
  try {
    mkdirSync(probe);
    rmdirSync(probe);
    return true;
  } catch {
    return false;
  }
}

function detectLayout(): CgroupLayout | null {
  if (existsSync('/sys/fs/cgroup/cgroup.controllers')) {
    const own = ownCgroupPath('') ?? '/';
    const parent = join('/sys/fs/cgroup', own);
    if (!writable(parent)) return null;
    const controllers = readFileSync(join(parent, 'cgroup.controllers'), 'utf8');
    return {
      version: 2,
      memoryParent: controllers.includes('memory') ? parent : null,
      pidsParent: controllers.includes('pids') ? parent : null,
    };
  }
  const memory = ownCgroupPath('memory');
  const memoryParent = memory === null ? null : join('/sys/fs/cgroup/memory', memory);
  const pids = ownCgroupPath('pids');
  const pidsParent = pids === null ? null : join('/sys/fs/cgroup/pids', pids);
  return {
    version: 1,
    memoryParent: memoryParent !== null && writable(memoryParent) ? memoryParent : null,
    pidsParent: pidsParent !== null && writable(pidsParent) ? pidsParent : null,
  };
}

/**
 * Per-slot cgroups holding memory and process caps. cgroup v1 and v2 are both handled; where the
 * hierarchy is not writable (unprivileged, or a read-only /sys) the limits are reported unsupported
 * and sandboxes run without them.
 */
export class SlotCgroups {
  readonly #layout: CgroupLayout | null;
  readonly support: LimitSupport;

  readonly #name: string;
  readonly #limits: ResourceLimits;

  constructor(name: string, limits: ResourceLimits) {
    this.#name = name;
    this.#limits = limits;
    const wanted = limits.memoryBytes !== undefined || limits.maxProcesses !== undefined;
    this.#layout = wanted ? detectLayout() : null;
    const memory = limits.memoryBytes !== undefined && this.#layout?.memoryParent != null;
    const processes = limits.maxProcesses !== undefined && this.#layout?.pidsParent != null;
    const missing: string[] = [];
    if (limits.memoryBytes !== undefined && !memory) missing.push('memory');
    if (limits.maxProcesses !== undefined && !processes) missing.push('pids');
    this.support = {
      memory,
      processes,
      reason: missing.length > 0 ? `no writable ${missing.join(' and ')} cgroup controller here` : null,
    };
  }

  /** The cgroup.procs files a slot's sandbox joins; created on first use with the limits written. */
  procsFiles(slotId: number): string[] {
    const files: string[] = [];
    const group = `${this.#name}-slot-${String(slotId).padStart(4, '0')}`;
    const layout = this.#layout;
    if (layout === null) return files;
    if (this.support.memory && layout.memoryParent !== null) {
      const dir = join(layout.memoryParent, group);
      mkdirSync(dir, { recursive: true });
      const limit = String(this.#limits.memoryBytes);
      writeFileSync(join(dir, layout.version === 1 ? 'memory.limit_in_bytes' : 'memory.max'), limit);
      if (layout.version === 2) writeFileSync(join(dir, 'memory.swap.max'), '0');
      files.push(join(dir, 'cgroup.procs'));
    }
    if (this.support.processes && layout.pidsParent !== null) {
      // Under v2 both controllers share one group directory.
      const dir = join(layout.pidsParent, group);
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'pids.max'), String(this.#limits.maxProcesses));
      const procs = join(dir, 'cgroup.procs');
      if (!files.includes(procs)) files.push(procs);
    }
    return files;
  }

  /** Wraps a sandbox argv so that its first process joins the slot's cgroups before exec. */
  wrap(slotId: number, argv: readonly string[]): string[] {
    const files = this.procsFiles(slotId);
    if (files.length === 0) return [...argv];
    const joins = files.map((file) => `echo $$ > '${file}'`).join(' && ');
    return ['/bin/sh', '-c', `${joins} && exec "$@"`, 'sandbox', ...argv];
  }

  /** Removes the slot cgroups (only empty ones can go; the rest are left for the kernel). */
  remove(slotCount: number): void {
    const layout = this.#layout;
    if (layout === null) return;
    for (let slot = 0; slot < slotCount; slot++) {
      const group = `${this.#name}-slot-${String(slot).padStart(4, '0')}`;
      for (const parent of [layout.memoryParent, layout.pidsParent]) {
        if (parent === null) continue;
        try {
          rmdirSync(join(parent, group));
        } catch {
          // Missing or still busy.
        }
      }
    }
  }
}
