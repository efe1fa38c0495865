// Benchmark: the rollout schedulers driving one simulated training run each, all on the same
// simulated inference engine. A trainer takes a fixed time per step (proportional to its batch); every
// agent rollout decodes a lognormal number of tokens (p99/p50 = 10, like agent episodes with a long
// tail) on an engine of 256 slots whose decode step slows down as its batch grows (continuous
// batching, as SGLang's; see engine-model.ts). Time is simulated: a virtual clock jumps from one
// pending timer to the next once all promise work has settled, so the real schedulers run unchanged
// and a run of hours takes seconds. Prints samples/s, trainer idle fraction, staleness and wasted
// generation per mode, and speedups relative to sync on the same engine in the same run. Rows on an
// engine without contention (the earlier model, generation free of it) are labelled as such. Last
// output line: one JSON object of headline figures.
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
import { type EngineOptions, SimulatedEngine, VirtualClock } from './engine-model.js';

const STEPS = 50;
const ROLLOUT_BATCH_SIZE = 32; // prompt groups per step
const SAMPLES_PER_PROMPT = 8;
const P99_OVER_P50 = 10;
const TRAIN_SECONDS_PER_FULL_BATCH = 300; // one optimizer step over 32 × 8 samples
const SIGMA = Math.log(P99_OVER_P50) / 2.326_347_874; // z of the 99th percentile
// The engine every mode shares: 256 slots (sync's peak: one batch of 32 × 8 calls), 20 ms per decode
// step alone, each running request adding 0.2 ms (its KV cache read): 71 ms per step with 256
// running, 3.6× slower per token than alone, and at most 5,000 tokens/s in all.
const ENGINE: EngineOptions = { slots: 256, stepSeconds: 0.02, perRequestSeconds: 0.0002 };
// The earlier model, labelled wherever it is printed: every call decodes as if alone, unlimited calls.
const FREE_GENERATION: EngineOptions = { slots: 1e9, stepSeconds: 0.02, perRequestSeconds: 0 };
// A median rollout decodes 3,000 tokens: 60 s alone on the engine, as the earlier 60 s median latency.
const MEDIAN_TOKENS = 60 / ENGINE.stepSeconds;
// How much the figures owe to the engine's cost per running request: half and twice the above.
const LIGHT_ENGINE: EngineOptions = { ...ENGINE, perRequestSeconds: ENGINE.perRequestSeconds / 2 };
const HEAVY_ENGINE: EngineOptions = { ...ENGINE, perRequestSeconds: ENGINE.perRequestSeconds * 2 };
// Partial-async settings: half-size steps; the proxy rejects rollouts spanning more weight updates
// than the bound, and the batch keeps the newest bound + 1 versions.
const PARTIAL_GLOBAL_BATCH = (ROLLOUT_BATCH_SIZE * SAMPLES_PER_PROMPT) / 2;

/**
 * One simulated configuration: a mode and, for the async modes, an optional staleness bound. A version
 * bound of N is the keep-(N+1)-versions filter: a group is dropped when a trajectory of it ended more
 * than N weight versions before the version the trainer trains it with; for partial-async the proxy
 * also rejects a rollout spanning more than N updates. `maxActiveGroups` is the scheduler's rollout
 * capacity (groups in flight); by default it is one batch, as for sync. The engine's capacity is
 * `engine`'s, whatever the scheduler sends it.
 */
interface Configuration {
  label: string;
  mode: RolloutMode;
  engine: EngineOptions;
  bound?: number;
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
  /** Tokens decoded for samples never trained (dropped, recalled, rejected, left over), as a share of all. */
  wastedGenerationFraction: number;
  generatedTokens: number;
  peakRunning: number;
  meanRunning: number;
  /** Decode rate per running request, tokens/s: 50 alone, lower as the batch grows. */
  tokensPerSecondPerRequest: number;
  wallSeconds: number;
}

async function simulate(configuration: Configuration): Promise<ModeResult> {
  const { mode, bound } = configuration;
  const clock = new VirtualClock();
  const engine = new SimulatedEngine(clock, configuration.engine);
  const random = createSeededRandom(2024);
  const lognormalTokens = () => {
    const u = Math.max(random(), Number.EPSILON);
    const normal = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
    return Math.max(1, Math.round(MEDIAN_TOKENS * Math.exp(SIGMA * normal)));
  };
  const maxVersionSpan = bound ?? 1;
  let version = 0;
  let session = 0;
  const tokensOf = new Map<string, number>();
  const generate: GenerateFunction = async (sample, _params, { signal }) => {
    const id = `sim-${session++}`;
    const start = version;
    const { generatedTokens } = await engine.generate(lognormalTokens(), signal);
    tokensOf.set(id, generatedTokens);
    const end = version;
    if (mode === 'partial-async' && end - start > maxVersionSpan) {
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
  const keepVersions =
    bound !== undefined ? bound + 1 : mode === 'partial-async' ? maxVersionSpan + 1 : undefined;
  const options: SchedulerOptionsInput = {
    rolloutBatchSize: ROLLOUT_BATCH_SIZE,
    nSamplesPerPrompt: SAMPLES_PER_PROMPT,
    numRollout: STEPS,
    maxRetries: 1_000,
    ...(mode === 'partial-async' ? { globalBatchSize: PARTIAL_GLOBAL_BATCH } : {}),
    ...(keepVersions !== undefined ? { stalenessKeepVersions: keepVersions } : {}),
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
  let trainedTokens = 0;
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
        retried +=
          metrics['dressage/partial_rollout_retried_groups'] ??
          metrics['dressage/fully_async_retried_groups'] ??
          0;
        const batch = samples.flat();
        // Weight versions behind: the policy being trained minus the version that wrote the first token.
        for (const sample of batch) {
          staleness.push(version - Number(sample.metadata.dressage_start_token_version));
          trainedTokens += tokensOf.get(sample.session_id ?? '') ?? 0;
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
    wastedGenerationFraction: 1 - trainedTokens / engine.generatedTokens,
    generatedTokens: engine.generatedTokens,
    peakRunning: engine.peakRunning,
    meanRunning: engine.busyRequestSeconds / clock.now,
    tokensPerSecondPerRequest: engine.generatedTokens / engine.busyRequestSeconds,
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
  `Simulated run: ${STEPS} steps, ${ROLLOUT_BATCH_SIZE} groups × ${SAMPLES_PER_PROMPT} samples, rollout length ` +
    `lognormal (median ${MEDIAN_TOKENS} tokens, p99/p50 ${P99_OVER_P50}), trainer ${TRAIN_SECONDS_PER_FULL_BATCH} s per ` +
    `${ROLLOUT_BATCH_SIZE * SAMPLES_PER_PROMPT} samples. Engine, the same for every mode: ${ENGINE.slots} slots, decode step ` +
    `${ENGINE.stepSeconds * 1000} ms + ${ENGINE.perRequestSeconds * 1000} ms per running request. Partial-async: global ` +
    `batch ${PARTIAL_GLOBAL_BATCH}, rollouts spanning more updates than the bound rejected and retried.`,
);
// The bounded mode the package recommends: the same 256 concurrent generate calls as sync, counted
// per sample, at most 1.5 batches generated ahead of the trainer, and groups a finished sample rules
// out stopped early.
const BUDGET_SAMPLES = ROLLOUT_BATCH_SIZE * SAMPLES_PER_PROMPT;
const BUDGET_OUTSTANDING_GROUPS = (3 * ROLLOUT_BATCH_SIZE) / 2;
const recall = { stalenessRecallInFlight: true };
const budget = {
  ...recall,
  asyncMaxActiveSamples: BUDGET_SAMPLES,
  asyncMaxOutstandingGroups: BUDGET_OUTSTANDING_GROUPS,
};
const doubled = 2 * ROLLOUT_BATCH_SIZE;
const configurations: Configuration[] = [
  { label: 'sync', mode: 'sync', engine: ENGINE },
  { label: 'fully-async', mode: 'fully-async', engine: ENGINE },
  { label: '≤1 filter', mode: 'fully-async', engine: ENGINE, bound: 1 },
  { label: '≤2 filter', mode: 'fully-async', engine: ENGINE, bound: 2 },
  { label: '≤1 recall', mode: 'fully-async', engine: ENGINE, bound: 1, extra: recall },
  { label: '≤2 recall', mode: 'fully-async', engine: ENGINE, bound: 2, extra: recall },
  { label: '≤1 budget', mode: 'fully-async', engine: ENGINE, bound: 1, extra: budget },
  { label: '≤2 budget', mode: 'fully-async', engine: ENGINE, bound: 2, extra: budget },
  { label: '≤1 2× groups', mode: 'fully-async', engine: ENGINE, bound: 1, maxActiveGroups: doubled },
  { label: '≤2 2× groups', mode: 'fully-async', engine: ENGINE, bound: 2, maxActiveGroups: doubled },
  { label: 'partial ≤1', mode: 'partial-async', engine: ENGINE, bound: 1 },
  { label: 'partial ≤2', mode: 'partial-async', engine: ENGINE, bound: 2 },
  // Labelled: generation free of contention (every call decodes as if alone), the earlier model.
  { label: 'free: sync', mode: 'sync', engine: FREE_GENERATION },
  { label: 'free: ≤1 budget', mode: 'fully-async', engine: FREE_GENERATION, bound: 1, extra: budget },
  { label: 'free: ≤2 budget', mode: 'fully-async', engine: FREE_GENERATION, bound: 2, extra: budget },
  // Labelled: the same engine with half and with twice the cost per running request.
  { label: 'light: sync', mode: 'sync', engine: LIGHT_ENGINE },
  { label: 'light: ≤1 budget', mode: 'fully-async', engine: LIGHT_ENGINE, bound: 1, extra: budget },
  { label: 'light: ≤2 budget', mode: 'fully-async', engine: LIGHT_ENGINE, bound: 2, extra: budget },
  { label: 'heavy: sync', mode: 'sync', engine: HEAVY_ENGINE },
  { label: 'heavy: ≤1 budget', mode: 'fully-async', engine: HEAVY_ENGINE, bound: 1, extra: budget },
  { label: 'heavy: ≤2 budget', mode: 'fully-async', engine: HEAVY_ENGINE, bound: 2, extra: budget },
];
const results: ModeResult[] = [];
for (const configuration of configurations) results.push(await simulate(configuration));
const byLabel = (label: string) => results.find((result) => result.label === label) as ModeResult;
const sync = byLabel('sync');
// Each row against sync on its own engine, measured in this run ("free: ≤1 budget" against "free: sync").
const baselineOf = (result: ModeResult) => {
  const engine = /^(\w+): /.exec(result.label)?.[1];
  return engine === undefined ? sync : byLabel(`${engine}: sync`);
};
const speedup = (result: ModeResult) => result.samplesPerSecond / baselineOf(result).samplesPerSecond;
// Groups generated and thrown away (dropped when complete, or recalled in flight), as a share of all
// groups that ended one way or the other.
const dropped = (result: ModeResult) => {
  const thrown = result.droppedStaleGroups + result.recalledGroups;
  return thrown / (thrown + result.trainedSamples / SAMPLES_PER_PROMPT);
};
console.log(
  'mode             samples/s  speedup  trainer idle  staleness mean/max  groups thrown  wasted tokens  running peak/mean  tok/s per req  wall s',
);
for (const result of results) {
  console.log(
    `${result.label.padEnd(16)} ${result.samplesPerSecond.toFixed(3).padStart(9)}  ${speedup(result).toFixed(2).padStart(6)}×  ` +
      `${(result.trainerIdleFraction * 100).toFixed(1).padStart(11)}%  ${result.meanStaleness.toFixed(2).padStart(9)} / ${String(result.maxStaleness).padEnd(6)}  ` +
      `${(dropped(result) * 100).toFixed(0).padStart(12)}%  ${(Math.max(0, result.wastedGenerationFraction) * 100).toFixed(0).padStart(12)}%  ` +
      `${String(result.peakRunning).padStart(8)} / ${result.meanRunning.toFixed(0).padEnd(6)}  ${result.tokensPerSecondPerRequest.toFixed(1).padStart(13)}  ${result.wallSeconds.toFixed(1).padStart(6)}`,
  );
}
console.log(
  'Rows "free:" decode every call as if alone with no limit on calls (no contention): not a real engine. ' +
    `Rows "light:" and "heavy:" cost ${LIGHT_ENGINE.perRequestSeconds * 1000} and ${HEAVY_ENGINE.perRequestSeconds * 1000} ms ` +
    'per running request. Each is compared with sync on its own engine.',
);
const summary = (result: ModeResult) =>
  `${speedup(result).toFixed(2)}× sync, trainer idle ${(result.trainerIdleFraction * 100).toFixed(1)}%, ` +
  `${(result.wastedGenerationFraction * 100).toFixed(0)}% of generated tokens wasted`;
for (const bound of [1, 2]) {
  console.log(
    `Bound ${bound}, same engine: fully-async with recall and the per-call budget ${summary(byLabel(`≤${bound} budget`))}; ` +
      `partial-async ${summary(byLabel(`partial ≤${bound}`))}. Free generation (not a real engine): ${summary(byLabel(`free: ≤${bound} budget`))}.`,
  );
}
const LARGE_FILE_LINES = 1_000_000;
const large = await largeFile(LARGE_FILE_LINES);
console.log(
  `Data source: ${LARGE_FILE_LINES} lines (${large.fileMiB.toFixed(0)} MiB) indexed in ${large.indexSeconds.toFixed(2)} s, ` +
    `≈${large.heldMiB.toFixed(1)} MiB held (line index + shuffle order), first 32 groups × 8 in ${large.batchMs.toFixed(1)} ms`,
);
const headline = (result: ModeResult, prefix: string) => ({
  [`${prefix}_speedup`]: round(speedup(result), 2),
  [`${prefix}_trainer_idle`]: round(result.trainerIdleFraction),
  [`${prefix}_wasted_generation`]: round(result.wastedGenerationFraction),
});
console.log(
  JSON.stringify({
    bench: 'schedulers',
    steps: STEPS,
    engine_slots: ENGINE.slots,
    engine_step_ms: ENGINE.stepSeconds * 1000,
    engine_per_request_ms: ENGINE.perRequestSeconds * 1000,
    sync_samples_per_s: round(sync.samplesPerSecond),
    sync_trainer_idle: round(sync.trainerIdleFraction),
    sync_mean_running: round(sync.meanRunning, 0),
    ...headline(byLabel('≤1 budget'), 'fully_async_bound1'),
    ...headline(byLabel('≤2 budget'), 'fully_async_bound2'),
    ...headline(byLabel('partial ≤1'), 'partial_async_bound1'),
    ...headline(byLabel('partial ≤2'), 'partial_async_bound2'),
    ...headline(byLabel('fully-async'), 'fully_async_unbounded'),
    fully_async_unbounded_staleness_max: byLabel('fully-async').maxStaleness,
    ...headline(byLabel('≤1 recall'), 'fully_async_bound1_recall'),
    ...headline(byLabel('≤2 recall'), 'fully_async_bound2_recall'),
    ...headline(byLabel('≤1 filter'), 'fully_async_bound1_filter_only'),
    ...headline(byLabel('≤2 filter'), 'fully_async_bound2_filter_only'),
    fully_async_bound1_mean_running: round(byLabel('≤1 budget').meanRunning, 0),
    ...headline(byLabel('free: ≤1 budget'), 'free_generation_fully_async_bound1'),
    ...headline(byLabel('free: ≤2 budget'), 'free_generation_fully_async_bound2'),
    light_engine_fully_async_bound1_speedup: round(speedup(byLabel('light: ≤1 budget')), 2),
    light_engine_fully_async_bound2_speedup: round(speedup(byLabel('light: ≤2 budget')), 2),
    heavy_engine_fully_async_bound1_speedup: round(speedup(byLabel('heavy: ≤1 budget')), 2),
    heavy_engine_fully_async_bound2_speedup: round(speedup(byLabel('heavy: ≤2 budget')), 2),
    jsonl_million_lines_index_s: round(large.indexSeconds, 2),
    jsonl_million_lines_held_mib: round(large.heldMiB, 1),
  }),
);
