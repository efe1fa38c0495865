// Sandbox pool benchmark: acquire latency from a warm pool (slots prepared in advance) and from a cold
// one (slots prepared on acquire), then 64 concurrent leases each running a command in bubblewrap.
// One run; the last line is a JSON object of the headline figures.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalBwrapPool } from '@dressage/sandbox';

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
};
const round = (value: number) => Math.round(value * 1000) / 1000;
const base = mkdtempSync(join(tmpdir(), 'sandbox-bench-'));
const samples = 40;

async function acquireLatencies(prewarm: boolean): Promise<number[]> {
  const latencies: number[] = [];
  const pool = new LocalBwrapPool({
    slots: samples,
    baseDir: join(base, prewarm ? 'warm' : 'cold'),
    prewarm,
    healthIntervalSeconds: 0,
  });
  await pool.start();
  for (let i = 0; i < samples; i++) {
    const started = performance.now();
    // A cold acquire prepares its slot (directories, and the probe sandbox below) on the spot.
    const lease = await pool.acquire(`trajectory-${i}`);
    if (!prewarm) await pool.runInSlot(lease, 'true');
    latencies.push(performance.now() - started);
    if (prewarm) await pool.runInSlot(lease, 'true');
  }
  await pool.stop();
  return latencies;
}

const warm = await acquireLatencies(true);
const cold = await acquireLatencies(false);

const concurrent = new LocalBwrapPool({
  slots: 64,
  baseDir: join(base, 'concurrent'),
  unshareNet: true,
  healthIntervalSeconds: 0,
});
await concurrent.start();
const started = performance.now();
const results = await Promise.all(
  Array.from({ length: 64 }, async (_, i) => {
    const lease = await concurrent.acquire(`concurrent-${i}`);
    const result = await concurrent.runInSlot(lease, 'echo $((6*7)) > answer.txt && cat answer.txt');
    await concurrent.release(lease);
    return result.stdout.trim() === '42';
  }),
);
const concurrentSeconds = (performance.now() - started) / 1000;
await concurrent.settled();
await concurrent.stop();
rmSync(base, { recursive: true, force: true });

const figures = {
  warm_acquire_p50_ms: round(percentile(warm, 50)),
  warm_acquire_p99_ms: round(percentile(warm, 99)),
  cold_acquire_p50_ms: round(percentile(cold, 50)),
  cold_acquire_p99_ms: round(percentile(cold, 99)),
  cold_over_warm_p50: round(percentile(cold, 50) / percentile(warm, 50)),
  concurrent_leases: 64,
  concurrent_ok: results.filter(Boolean).length,
  concurrent_wall_s: round(concurrentSeconds),
  concurrent_commands_per_s: round(64 / concurrentSeconds),
};
console.log(`warm acquire  p50 ${figures.warm_acquire_p50_ms} ms  p99 ${figures.warm_acquire_p99_ms} ms`);
console.log(
  `cold acquire  p50 ${figures.cold_acquire_p50_ms} ms  p99 ${figures.cold_acquire_p99_ms} ms  (cold/warm p50 ${figures.cold_over_warm_p50}x)`,
);
console.log(
  `64 concurrent leases with a command: ${figures.concurrent_ok}/64 ok in ${figures.concurrent_wall_s} s (${figures.concurrent_commands_per_s}/s)`,
);
console.log(JSON.stringify(figures));
