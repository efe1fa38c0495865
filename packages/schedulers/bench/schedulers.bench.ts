// Benchmark: the three rollout schedulers driving one simulated training run each. A trainer takes
// a fixed time per step (proportional to its batch); every agent rollout takes a lognormal time
// (p99/p50 = 10, like agent episodes with a long tail). Time is simulated: a virtual clock jumps from
// one pending timer to the next once all promise work has settled, so the real schedulers run
// unchanged and a run of hours takes a second. Prints samples/s, trainer idle fraction and weight
// staleness per mode, and speedups relative to sync. Last output line: one JSON object of headline figures.
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Sample, SampleStatus } from '@dressage/protocol';
import {
  createRolloutScheduler,
  type GenerateFunction,
  JsonlPromptStore,
  PromptDataSource,
  type RolloutMode,
  type SchedulerOptionsInput,
} from '../src/index.js';
import { createSeededRandom } from '../src/internal.js';

const STEPS = 50;
const ROLLOUT_BATCH_SIZE = 32; // prompt groups per step
const SAMPLES_PER_PROMPT = 8;
const MEDIAN_ROLLOUT_SECONDS = 60;
const P99_OVER_P50 = 10;
const TRAIN_SECONDS_PER_FULL_BATCH = 300; // one optimizer step over 32 × 8 samples
const SIGMA = Math.log(P99_OVER_P50) / 2.326_347_874; // z of the 99th percentile
// Partial-async settings: half-size steps, proxy rejects rollouts spanning > 1 weight update,
// the batch keeps the newest 2 versions.
const PARTIAL_GLOBAL_BATCH = (ROLLOUT_BATCH_SIZE * SAMPLES_PER_PROMPT) / 2;
const PARTIAL_MAX_VERSION_SPAN = 1;
const PARTIAL_KEEP_VERSIONS = 2;

/** A clock that only moves when every task is waiting on it. */
class VirtualClock {
  now = 0;
  private heap: { at: number; order: number; fire: () => void }[] = [];
  private order = 0;

  sleep(seconds: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const entry = {
        at: this.now + seconds,
        order: this.order++,
        fire: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        entry.fire = () => {};
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.push(entry);
    });
  }

  /** Runs `main` to completion, advancing time whenever nothing else can happen. */
  async run<T>(main: Promise<T>): Promise<T> {
    let settled = false;
    const result = main.finally(() => {
      settled = true;
    });
    while (!settled) {
      await new Promise((resolve) => setImmediate(resolve));
      if (settled) break;
      const next = this.pop();
      if (next === undefined)
        throw new Error('simulation stalled: nothing scheduled and the run is not done');
      this.now = next.at;
      next.fire();
    }
    return result;
  }

  private push(entry: { at: number; order: number; fire: () => void }): void {
    const heap = this.heap;
    heap.push(entry);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(heap[i]!, heap[parent]!)) break;
      [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
      i = parent;
    }
  }

  private pop(): { at: number; order: number; fire: () => void } | undefined {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0 && last !== undefined) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < heap.length && this.before(heap[left]!, heap[smallest]!)) smallest = left;
        if (right < heap.length && this.before(heap[right]!, heap[smallest]!)) smallest = right;
        if (smallest === i) break;
        [heap[i], heap[smallest]] = [heap[smallest]!, heap[i]!];
        i = smallest;
      }
    }
    return top;
  }

  private before(a: { at: number; order: number }, b: { at: number; order: number }): boolean {
    return a.at < b.at || (a.at === b.at && a.order < b.order);
  }
}

/**
 * One simulated configuration: a mode and, for fully-async, an optional staleness bound. A version
 * bound of N is the keep-(N+1)-versions filter: a group is dropped when a trajectory of it ended more
 * than N weight versions before the version the trainer trains it with. `maxActiveGroups` is the
 * rollout capacity (groups in flight); by default it is one batch, as for sync.
 */
interface Configuration {
  label: string;
  mode: RolloutMode;
  keepVersions?: number;
  maxActiveGroups?: number;
  extra?: Partial<SchedulerOptionsInput>;
}

interface ModeResult {
  label: string;
  mode: RolloutMode;
  simulatedSeconds: number;
  trainedSamples: number;
  samplesPerSecond: number;
  trainerIdleFraction: number;
  meanStaleness: number;
  maxStaleness: number;
  droppedStaleGroups: number;
  retriedGroups: number;
  recalledGroups: number;
  refreshedSamples: number;
  /** Generation time (sample-seconds) spent on samples never trained, as a share of all of it. */
  wastedGenerationFraction: number;
  peakConcurrentSamples: number;
  meanConcurrentSamples: number;
  wallSeconds: number;
}

async function simulate(configuration: Configuration): Promise<ModeResult> {
  const { mode } = configuration;
  const clock = new VirtualClock();
  const random = createSeededRandom(2024);
  const lognormal = () => {
    const u = Math.max(random(), Number.EPSILON);
    const normal = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
    return MEDIAN_ROLLOUT_SECONDS * Math.exp(SIGMA * normal);
  };
  let version = 0;
  let session = 0;
  let running = 0;
  let peakRunning = 0;
  let generationSeconds = 0;
  const durations = new Map<string, number>();
  const generate: GenerateFunction = async (sample, _params, { signal }) => {
    const id = `sim-${session++}`;
    const start = version;
    const startedAt = clock.now;
    running++;
    peakRunning = Math.max(peakRunning, running);
    try {
      await clock.sleep(lognormal(), signal);
    } finally {
      running--;
      generationSeconds += clock.now - startedAt;
    }
    durations.set(id, clock.now - startedAt);
    const end = version;
    if (mode === 'partial-async' && end - start > PARTIAL_MAX_VERSION_SPAN) {
      throw new Error(`partial_rollout_staleness_exceeded: ${id} spans versions ${start}..${end}`);
    }
    const versions = Array.from({ length: end - start + 1 }, (_, i) => String(start + i));
    return {
      ...sample,
      session_id: id,
      tokens: [1, 2, 3, 4],
      response_length: 2,
      loss_mask: [1, 1],
      status: SampleStatus.COMPLETED,
      metadata: {
        ...sample.metadata,
        parent_traj_id: id,
        dressage_start_token_version: String(start),
        dressage_end_token_version: String(end),
        full_versions: versions,
      },
    } satisfies Sample;
  };
  const records = Array.from({ length: 4096 }, (_, i) => ({ prompt: `task ${i}`, label: 'done' }));
  const dataSource = PromptDataSource.fromRecords(records, { nSamplesPerPrompt: SAMPLES_PER_PROMPT });
  const options: SchedulerOptionsInput = {
    rolloutBatchSize: ROLLOUT_BATCH_SIZE,
    nSamplesPerPrompt: SAMPLES_PER_PROMPT,
    numRollout: STEPS,
    maxRetries: 1_000,
    ...(mode === 'partial-async'
      ? { globalBatchSize: PARTIAL_GLOBAL_BATCH, stalenessKeepVersions: PARTIAL_KEEP_VERSIONS }
      : {}),
    ...(configuration.keepVersions !== undefined
      ? { stalenessKeepVersions: configuration.keepVersions }
      : {}),
    ...(configuration.maxActiveGroups !== undefined
      ? { asyncMaxActiveGroups: configuration.maxActiveGroups }
      : {}),
    ...configuration.extra,
  };
  const scheduler = createRolloutScheduler(
    mode,
    { dataSource, generate, logger: { warn: () => {} } },
    options,
    {},
  );
  const started = performance.now();
  let idle = 0;
  let trained = 0;
  let dropped = 0;
  let retried = 0;
  let recalled = 0;
  let refreshed = 0;
  let trainedGenerationSeconds = 0;
  const staleness: number[] = [];
  await clock.run(
    (async () => {
      for (let step = 0; step < STEPS; step++) {
        const waitFrom = clock.now;
        const { samples, metrics } = await scheduler.generateRollout(step, {
          weightVersion: String(version),
        });
        idle += clock.now - waitFrom;
        dropped += metrics['staleness/dropped_groups'] ?? 0;
        recalled += metrics['staleness/recalled_groups'] ?? 0;
        refreshed += metrics['staleness/refreshed_samples'] ?? 0;
        retried +=
          metrics['dressage/partial_rollout_retried_groups'] ??
          metrics['dressage/fully_async_retried_groups'] ??
          0;
        const batch = samples.flat();
        // Weight versions behind: the policy being trained minus the version that wrote the first token.
        for (const sample of batch) {
          staleness.push(version - Number(sample.metadata.dressage_start_token_version));
          trainedGenerationSeconds += durations.get(sample.session_id ?? '') ?? 0;
        }
        trained += batch.length;
        await clock.sleep(
          (TRAIN_SECONDS_PER_FULL_BATCH * batch.length) / (ROLLOUT_BATCH_SIZE * SAMPLES_PER_PROMPT),
        );
        version++;
      }
      await scheduler.shutdown();
    })(),
  );
  return {
    label: configuration.label,
    mode,
    simulatedSeconds: clock.now,
    trainedSamples: trained,
    samplesPerSecond: trained / clock.now,
    trainerIdleFraction: idle / clock.now,
    meanStaleness: staleness.reduce((sum, value) => sum + value, 0) / staleness.length,
    maxStaleness: Math.max(...staleness),
    droppedStaleGroups: dropped,
    retriedGroups: retried,
    recalledGroups: recalled,
    refreshedSamples: refreshed,
    wastedGenerationFraction: 1 - trainedGenerationSeconds / generationSeconds,
    peakConcurrentSamples: peakRunning,
    meanConcurrentSamples: generationSeconds / clock.now,
    wallSeconds: (performance.now() - started) / 1000,
  };
}

const round = (value: number, digits = 3) => Number(value.toFixed(digits));

// The data source on a prompt file of a million lines: index time, heap held, first shuffled batch.
async function largeFile(
  lines: number,
): Promise<{ indexSeconds: number; heldMiB: number; fileMiB: number; batchMs: number }> {
  const directory = await mkdtemp(join(tmpdir(), 'dressage-bench-'));
  try {
    const file = join(directory, 'prompts.jsonl');
    const out = createWriteStream(file);
    let bytes = 0;
    for (let i = 0; i < lines; i++) {
      const line = `{"prompt":"Solve task ${i}: make the failing test in module_${i % 997}.py pass","label":"${i % 7}","metadata":{"instance_id":"inst-${i}","reward_fn":"contains_label"}}\n`;
      bytes += line.length;
      if (!out.write(line)) await new Promise<void>((resolve) => out.once('drain', () => resolve()));
    }
    await new Promise<void>((resolve) => out.end(() => resolve()));
    const started = performance.now();
    const store = await JsonlPromptStore.open(file);
    const source = new PromptDataSource(store, { shuffle: true, seed: 1, nSamplesPerPrompt: 8 });
    const indexSeconds = (performance.now() - started) / 1000;
    const batchStarted = performance.now();
    await source.getSamples(32);
    const batchMs = performance.now() - batchStarted;
    // What stays in memory: the line index plus the epoch's shuffled order (4 bytes per line).
    const heldBytes = store.indexBytes + 4 * store.size;
    return { indexSeconds, heldMiB: heldBytes / 2 ** 20, fileMiB: bytes / 2 ** 20, batchMs };
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
}

console.log(
  `Simulated run: ${STEPS} steps, ${ROLLOUT_BATCH_SIZE} groups × ${SAMPLES_PER_PROMPT} samples, rollout latency ` +
    `lognormal (median ${MEDIAN_ROLLOUT_SECONDS} s, p99/p50 ${P99_OVER_P50}), trainer ${TRAIN_SECONDS_PER_FULL_BATCH} s per ` +
    `${ROLLOUT_BATCH_SIZE * SAMPLES_PER_PROMPT} samples. Partial-async: global batch ${PARTIAL_GLOBAL_BATCH}, ` +
    `max version span ${PARTIAL_MAX_VERSION_SPAN}, keep ${PARTIAL_KEEP_VERSIONS} versions.`,
);
const results: ModeResult[] = [];
// The fast bounded mode: the same 256 concurrent generate calls as sync, counted per sample, at most
// 1.5 batches generated ahead of the trainer, and groups a finished sample rules out stopped early.
const BUDGET_SAMPLES = ROLLOUT_BATCH_SIZE * SAMPLES_PER_PROMPT;
const BUDGET_OUTSTANDING_GROUPS = (3 * ROLLOUT_BATCH_SIZE) / 2;
const recall = { stalenessRecallInFlight: true };
const budget = {
  ...recall,
  asyncMaxActiveSamples: BUDGET_SAMPLES,
  asyncMaxOutstandingGroups: BUDGET_OUTSTANDING_GROUPS,
};
const configurations: Configuration[] = [
  { label: 'sync', mode: 'sync' },
  { label: 'fully-async', mode: 'fully-async' },
  { label: 'fully-async ≤1', mode: 'fully-async', keepVersions: 2 },
  { label: 'fully-async ≤2', mode: 'fully-async', keepVersions: 3 },
  { label: '≤1 recall', mode: 'fully-async', keepVersions: 2, extra: recall },
  { label: '≤2 recall', mode: 'fully-async', keepVersions: 3, extra: recall },
  { label: '≤1 budget', mode: 'fully-async', keepVersions: 2, extra: budget },
  { label: '≤2 budget', mode: 'fully-async', keepVersions: 3, extra: budget },
  { label: '≤1 2× groups', mode: 'fully-async', keepVersions: 2, maxActiveGroups: 2 * ROLLOUT_BATCH_SIZE },
  { label: '≤2 2× groups', mode: 'fully-async', keepVersions: 3, maxActiveGroups: 2 * ROLLOUT_BATCH_SIZE },
  { label: 'partial-async', mode: 'partial-async' },
];
for (const configuration of configurations) results.push(await simulate(configuration));
const sync = results[0] as ModeResult;
console.log(
  'mode             samples/s  speedup  trainer idle  staleness mean/max  stale drops  recalled  wasted gen  samples peak/mean  wall s',
);
for (const result of results) {
  console.log(
    `${result.label.padEnd(16)} ${result.samplesPerSecond.toFixed(3).padStart(9)}  ${(result.samplesPerSecond / sync.samplesPerSecond).toFixed(2).padStart(6)}×  ` +
      `${(result.trainerIdleFraction * 100).toFixed(1).padStart(11)}%  ${result.meanStaleness.toFixed(2).padStart(9)} / ${String(result.maxStaleness).padEnd(6)}  ` +
      `${String(result.droppedStaleGroups).padStart(11)}  ${String(result.recalledGroups).padStart(8)}  ${(Math.max(0, result.wastedGenerationFraction) * 100).toFixed(0).padStart(9)}%  ` +
      `${String(result.peakConcurrentSamples).padStart(8)} / ${result.meanConcurrentSamples.toFixed(0).padEnd(6)}  ${result.wallSeconds.toFixed(1).padStart(6)}`,
  );
}
const byLabel = (label: string) => results.find((result) => result.label === label) as ModeResult;
const fully = byLabel('fully-async');
const partial = byLabel('partial-async');
const bound1Filter = byLabel('fully-async ≤1');
const bound2Filter = byLabel('fully-async ≤2');
const bound1 = byLabel('≤1 budget');
const bound2 = byLabel('≤2 budget');
const bound1Doubled = byLabel('≤1 2× groups');
const speedup = (result: ModeResult) => result.samplesPerSecond / sync.samplesPerSecond;
// Groups generated and thrown away (dropped when complete, or recalled in flight), as a share of all
// groups that ended one way or the other.
const dropped = (result: ModeResult) => {
  const thrown = result.droppedStaleGroups + result.recalledGroups;
  return thrown / (thrown + result.trainedSamples / SAMPLES_PER_PROMPT);
};
const summary = (result: ModeResult) =>
  `${speedup(result).toFixed(2)}× sync, trainer idle ${(result.trainerIdleFraction * 100).toFixed(1)}%, ` +
  `${(dropped(result) * 100).toFixed(0)}% of groups thrown away, ${(result.wastedGenerationFraction * 100).toFixed(0)}% of generation wasted`;
console.log(
  `Bound 1, filter only (32 groups in flight): ${summary(bound1Filter)}. With the sample budget ` +
    `(${BUDGET_SAMPLES} calls, ${BUDGET_OUTSTANDING_GROUPS} groups ahead, recall): ${summary(bound1)}.`,
);
console.log(`Bound 2, filter only: ${summary(bound2Filter)}. With the sample budget: ${summary(bound2)}.`);
const LARGE_FILE_LINES = 1_000_000;
const large = await largeFile(LARGE_FILE_LINES);
console.log(
  `Data source: ${LARGE_FILE_LINES} lines (${large.fileMiB.toFixed(0)} MiB) indexed in ${large.indexSeconds.toFixed(2)} s, ` +
    `≈${large.heldMiB.toFixed(1)} MiB held (line index + shuffle order), first 32 groups × 8 in ${large.batchMs.toFixed(1)} ms`,
);
console.log(
  JSON.stringify({
    bench: 'schedulers',
    steps: STEPS,
    sync_samples_per_s: round(sync.samplesPerSecond),
    fully_async_samples_per_s: round(fully.samplesPerSecond),
    partial_async_samples_per_s: round(partial.samplesPerSecond),
    fully_async_speedup: round(fully.samplesPerSecond / sync.samplesPerSecond, 2),
    partial_async_speedup: round(partial.samplesPerSecond / sync.samplesPerSecond, 2),
    sync_trainer_idle: round(sync.trainerIdleFraction),
    fully_async_trainer_idle: round(fully.trainerIdleFraction),
    partial_async_trainer_idle: round(partial.trainerIdleFraction),
    fully_async_staleness_mean: round(fully.meanStaleness, 2),
    fully_async_staleness_max: fully.maxStaleness,
    partial_async_staleness_mean: round(partial.meanStaleness, 2),
    partial_async_staleness_max: partial.maxStaleness,
    fully_async_bound1_speedup: round(speedup(bound1), 2),
    fully_async_bound1_trainer_idle: round(bound1.trainerIdleFraction),
    fully_async_bound1_dropped_fraction: round(dropped(bound1)),
    fully_async_bound1_wasted_generation: round(bound1.wastedGenerationFraction),
    fully_async_bound1_mean_concurrent_samples: round(bound1.meanConcurrentSamples, 0),
    fully_async_bound2_speedup: round(speedup(bound2), 2),
    fully_async_bound2_trainer_idle: round(bound2.trainerIdleFraction),
    fully_async_bound2_dropped_fraction: round(dropped(bound2)),
    fully_async_bound2_wasted_generation: round(bound2.wastedGenerationFraction),
    fully_async_bound1_filter_only_speedup: round(speedup(bound1Filter), 2),
    fully_async_bound1_filter_only_trainer_idle: round(bound1Filter.trainerIdleFraction),
    fully_async_bound1_filter_only_wasted_generation: round(bound1Filter.wastedGenerationFraction),
    fully_async_bound2_filter_only_speedup: round(speedup(bound2Filter), 2),
    fully_async_bound2_filter_only_trainer_idle: round(bound2Filter.trainerIdleFraction),
    fully_async_bound1_doubled_capacity_speedup: round(speedup(bound1Doubled), 2),
    fully_async_bound1_doubled_capacity_trainer_idle: round(bound1Doubled.trainerIdleFraction),
    sync_mean_concurrent_samples: round(sync.meanConcurrentSamples, 0),
    fully_async_mean_concurrent_samples: round(fully.meanConcurrentSamples, 0),
    jsonl_million_lines_index_s: round(large.indexSeconds, 2),
    jsonl_million_lines_held_mib: round(large.heldMiB, 1),
  }),
);
