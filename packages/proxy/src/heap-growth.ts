// How far a proxy's heap may grow between full collections once it holds many sessions.
import { constants, PerformanceObserver } from 'node:perf_hooks';
import v8 from 'node:v8';

/**
 * The growth the proxy's flags (`proxyNodeFlags`) set, kept while the heap is small: the old
 * generation may double.
 */
export const fullHeapGrowingPercent = 100;

/**
 * The least growth allowed however large the heap: below it full collections of a large heap would
 * come too often for what they free.
 */
export const leastHeapGrowingPercent = 20;

/** The room, in bytes, the policy allows above the live data once doubling would exceed it. */
export const defaultHeapRoomBytes = 384 * 1024 ** 2;

/**
 * The growth, in percent of the live data, that keeps the collector's room within `roomBytes`:
 * 100 (double) while the live data is under `roomBytes`, then `roomBytes` of it, never below
 * {@link leastHeapGrowingPercent}.
 */
export function heapGrowingPercent(liveBytes: number, roomBytes: number = defaultHeapRoomBytes): number {
  if (!(liveBytes > 0)) return fullHeapGrowingPercent;
  const percent = Math.floor((100 * roomBytes) / liveBytes);
  return Math.min(fullHeapGrowingPercent, Math.max(leastHeapGrowingPercent, percent));
}

/** A running policy: what it set last, and a way to stop it. */
export interface HeapGrowthPolicy {
  /** The `--heap-growing-percent` in force, as this policy last set it. */
  readonly percent: number;
  /** How many times the policy changed it. */
  readonly changes: number;
  /** Stops watching collections; the percent in force stays. */
  close(): void;
}

/**
 * Bounds the collector's room for a large heap. The proxy's flags (`proxyNodeFlags`) let the old
 * generation double after a full collection, which small heaps need (a smaller fixed growth made
 * full collections run every second with 64 long sessions); with thousands of sessions the same
 * doubling lets resident memory reach twice the live data. After every full collection this reads
 * the live heap and its external memory (token buffers, request bodies) and sets V8's
 * `--heap-growing-percent` to {@link heapGrowingPercent} of it, taking effect from the next one.
 *
 * It assumes the process started with `--heap-growing-percent=100` (a fixed factor, as the proxy's
 * bin does): it only ever sets fixed factors. Call it once per process.
 */
export function installHeapGrowthPolicy(options: { roomBytes?: number } = {}): HeapGrowthPolicy {
  const roomBytes = options.roomBytes ?? defaultHeapRoomBytes;
  let percent = fullHeapGrowingPercent;
  let changes = 0;
  const observer = new PerformanceObserver((list) => {
    let major = false;
    for (const entry of list.getEntries()) {
      const detail = 'detail' in entry ? (entry.detail as { kind?: number } | null) : null;
      if (detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) major = true;
    }
    if (!major) return;
    const heap = v8.getHeapStatistics();
    const next = heapGrowingPercent(heap.used_heap_size + heap.external_memory, roomBytes);
    if (next === percent) return;
    // V8 reads the flag each time it sets the next collection's limit (heap-controller.cc,
    // CalculateAllocationLimit), so the change holds from the collection after this one.
    v8.setFlagsFromString(`--heap-growing-percent=${next}`);
    percent = next;
    changes += 1;
  });
  observer.observe({ entryTypes: ['gc'] });
  return {
    get percent() {
      return percent;
    },
    get changes() {
      return changes;
    },
    close: () => observer.disconnect(),
  };
}
