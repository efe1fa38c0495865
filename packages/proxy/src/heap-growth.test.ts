import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { heapGrowingPercent, leastHeapGrowingPercent } from './heap-growth.js';

const mib = 1024 ** 2;

describe('heapGrowingPercent', () => {
  it('doubles a small heap, keeps a large one within the room, and never goes below the least', () => {
    expect(heapGrowingPercent(0, 384 * mib)).toBe(100);
    expect(heapGrowingPercent(200 * mib, 384 * mib)).toBe(100);
    expect(heapGrowingPercent(384 * mib, 384 * mib)).toBe(100);
    expect(heapGrowingPercent(768 * mib, 384 * mib)).toBe(50);
    expect(heapGrowingPercent(1536 * mib, 384 * mib)).toBe(25);
    expect(heapGrowingPercent(8192 * mib, 384 * mib)).toBe(leastHeapGrowingPercent);
  });
});

// A process that keeps ~250 MiB alive while it makes garbage, with V8 tracing its full
// collections: how much the old generation grew between one full collection's end and the next's
// start, after the heap passed the policy's room (16 MiB here).
function growthAfterFullCollections(withPolicy: boolean): { ratios: number[]; output: string } {
  const module = new URL('./heap-growth.ts', import.meta.url).pathname;
  const script = `
    import { installHeapGrowthPolicy } from ${JSON.stringify(module)};
    const policy = ${withPolicy} ? installHeapGrowthPolicy({ roomBytes: 16 * 1024 ** 2 }) : null;
    const keep = [];
    let garbage;
    for (let step = 0; step < 80; step++) {
      for (let i = 0; i < 20000; i++) {
        keep.push(new Array(16).fill(step));
        garbage = new Array(256).fill(i);
      }
      // Let the observer hear of the collections so far.
      await new Promise((resolve) => setImmediate(resolve));
    }
    console.log('policy', policy === null ? 'off' : policy.percent, policy === null ? 0 : policy.changes, keep.length, garbage.length);
  `;
  const run = spawnSync(
    process.execPath,
    ['--heap-growing-percent=100', '--trace-gc', '--import', 'tsx', '--input-type=module', '-e', script],
    { encoding: 'utf8', timeout: 120_000 },
  );
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  // "Mark-Compact 150.9 (173.9) -> 143.1 (183.7) MB": the heap before and after, in MB.
  const collections = [
    ...run.stdout.matchAll(/Mark-Compact(?: \(reduce\))? ([\d.]+) \([\d.]+\) -> ([\d.]+) \(/g),
  ].map((match) => ({ before: Number(match[1]), after: Number(match[2]) }));
  const ratios: number[] = [];
  for (let index = 1; index < collections.length; index++) {
    const previous = collections[index - 1] as { after: number };
    const current = collections[index] as { before: number };
    // Only once the live heap is well past the room, so the policy's percent is in force.
    if (previous.after > 64) ratios.push(current.before / previous.after);
  }
  return { ratios, output: run.stdout };
}

describe('installHeapGrowthPolicy', () => {
  it('lets a large heap grow by its room between full collections, where the flags alone double it', () => {
    const without = growthAfterFullCollections(false);
    const withPolicy = growthAfterFullCollections(true);
    expect(without.ratios.length, without.output).toBeGreaterThan(0);
    expect(withPolicy.ratios.length, withPolicy.output).toBeGreaterThan(1);
    // The flags alone: the old generation doubles (and then some, as marking runs behind).
    expect(Math.min(...without.ratios), without.output).toBeGreaterThan(1.7);
    // The policy: 20% at this heap (16 MiB of room is less than that), plus what was promoted
    // while the collection was marking; its first collections past the room still ran under the
    // percent set by the one before.
    expect(withPolicy.output).toMatch(/^policy 20 [1-9]/m);
    const ratios = withPolicy.ratios.slice(2);
    expect(ratios.length, withPolicy.output).toBeGreaterThan(2);
    expect(Math.max(...ratios), withPolicy.output).toBeLessThan(1.5);
  }, 240_000);
});
