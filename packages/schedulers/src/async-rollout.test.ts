import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Sample } from '@dressage/protocol';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  type Behavior,
  createGate,
  promptRecords,
  recordingDiscarder,
  recordingLogger,
  scriptedGenerate,
  until,
} from './__fixtures__/generators.js';
import { AsyncRolloutScheduler, PARTIAL_ROLLOUT_STALENESS_MARKER } from './async-rollout.js';
import { PromptDataSource, type RolloutDataSource } from './data-source.js';
import type { GenerateContext } from './generate.js';
import { resolveSchedulerOptions, type SchedulerOptionsInput } from './options.js';

const schedulers: AsyncRolloutScheduler[] = [];

afterEach(async () => {
  vi.useRealTimers();
  await Promise.all(schedulers.splice(0).map((scheduler) => scheduler.shutdown()));
});

function setup(
  mode: 'fully-async' | 'partial-async',
  script: (sample: Sample, context: GenerateContext) => Behavior = () => ({}),
  options: Partial<SchedulerOptionsInput> = {},
  dataSource: RolloutDataSource = PromptDataSource.fromRecords(promptRecords(64), { nSamplesPerPrompt: 2 }),
) {
  const run = scriptedGenerate(script);
  const discarder = recordingDiscarder();
  const logger = recordingLogger();
  const scheduler = new AsyncRolloutScheduler(
    mode,
    { dataSource, generate: run.generate, sessionDiscarder: discarder, logger },
    resolveSchedulerOptions({ rolloutBatchSize: 4, nSamplesPerPrompt: 2, ...options }, { env: {} }),
  );
  schedulers.push(scheduler);
  return { dataSource, run, discarder, logger, scheduler };
}

const groupIndexes = (groups: Sample[][]) => groups.map((group) => group[0]?.group_index);
const tick = (ms = 0) => new Promise((resolve) => setTimeout(resolve, ms));

describe('fully-async scheduler', () => {
  it('returns rolloutBatchSize groups sorted by index and keeps at most the active cap in flight', async () => {
    let peak = 0;
    const { scheduler, run } = setup(
      'fully-async',
      (sample) => {
        peak = Math.max(peak, run.running() + 1);
        return { delay: 1 + ((sample.group_index ?? 0) % 3) * 3 };
      },
      { asyncMaxActiveGroups: 3 },
    );
    const { samples, metrics } = await scheduler.generateRollout(0);
    expect(samples).toHaveLength(4);
    const indexes = samples.map((group) => group[0]?.index ?? -1);
    expect(indexes).toEqual([...indexes].sort((a, b) => a - b));
    // Two samples per group run at once, three groups at most.
    expect(peak).toBeLessThanOrEqual(6);
    expect(metrics['dressage/fully_async_returned_groups']).toBe(4);
    expect(metrics['dressage/fully_async_target_groups']).toBe(4);
  });

  it('carries extra completed groups over to the next call instead of dropping them', async () => {
    const { scheduler } = setup('fully-async', () => ({}), { asyncMaxActiveGroups: 8, rolloutBatchSize: 3 });
    const seen: number[] = [];
    for (let rollout = 0; rollout < 4; rollout++) {
      const { samples } = await scheduler.generateRollout(rollout);
      seen.push(...groupIndexes(samples).map(Number));
    }
    // Every group the worker finished is trained on exactly once, in order.
    expect(seen).toEqual(Array.from({ length: 12 }, (_, i) => i));
  });

  it('requeues failed groups through the data source with retry bookkeeping and discards their sessions', async () => {
    const { scheduler, dataSource, discarder } = setup('fully-async', (sample, context) =>
      sample.group_index === 1 && context.attempt === 0 ? { fail: 'throw' } : { delay: 2 },
    );
    const addSamples = vi.spyOn(dataSource, 'addSamples');
    const first = await scheduler.generateRollout(0);
    const second = await scheduler.generateRollout(1);
    expect(addSamples).toHaveBeenCalledTimes(1);
    // The retry rejoins the pipeline behind groups already in flight: it lands in one of the calls.
    const retried = [...first.samples, ...second.samples].find((group) => group[0]?.group_index === 1);
    const metrics = first.metrics;
    expect(retried?.map((sample) => sample.metadata.dressage_retry_count)).toEqual([1, 1]);
    expect(retried?.map((sample) => sample.metadata.last_retry_session_id)).toEqual(['s2-0', 's3-0']);
    expect(metrics['dressage/fully_async_retried_groups']).toBe(1);
    expect(metrics['dressage/fully_async_failed_groups']).toBe(1);
    await scheduler.shutdown();
    expect(discarder.discarded).toEqual(expect.arrayContaining(['s2-0', 's3-0']));
  });

  it('drops exhausted groups and fails after too many drops', async () => {
    const dropping = setup('fully-async', (sample) => (sample.group_index === 0 ? { fail: 'empty' } : {}), {
      maxRetries: 1,
    });
    const { samples, metrics } = await dropping.scheduler.generateRollout(0);
    expect(groupIndexes(samples)).not.toContain(0);
    expect(metrics['dressage/fully_async_dropped_failed_groups']).toBe(1);
    expect(dropping.logger.warnings.some((warning) => warning.includes('dropping group 0'))).toBe(true);

    const failing = setup('fully-async', () => ({ fail: 'throw' }), {
      maxRetries: 0,
      asyncMaxDroppedFailedGroups: 3,
    });
    await expect(failing.scheduler.generateRollout(0)).rejects.toMatchObject({
      code: 'resource_exhausted',
      message: expect.stringContaining('DRESSAGE_ASYNC_MAX_DROPPED_FAILED_GROUPS'),
    });
  });

  it('pauses dispatch while the output queue is 80% full', async () => {
    const { scheduler } = setup('fully-async', () => ({}), {
      rolloutBatchSize: 2,
      asyncMaxActiveGroups: 1,
      asyncOutputQueueSize: 5,
    });
    await scheduler.generateRollout(0);
    await until(() => scheduler.pipeline.queued === 4);
    await tick(5);
    expect(scheduler.pipeline).toEqual({ active: 0, activeSamples: 0, queued: 4, running: true });
    // Collecting frees room and the worker tops up again.
    await scheduler.generateRollout(1);
    await until(() => scheduler.pipeline.queued === 4);
    await tick(5);
    expect(scheduler.pipeline).toEqual({ active: 0, activeSamples: 0, queued: 4, running: true });
  });

  it('warns when no group completes for the configured time', async () => {
    vi.useFakeTimers();
    const { scheduler, logger } = setup('fully-async', () => ({ delay: 5_000 }), {
      asyncNoProgressWarnSec: 1,
    });
    const pending = scheduler.generateRollout(0);
    await vi.advanceTimersByTimeAsync(2_500);
    expect(logger.warnings.filter((warning) => warning.includes('no group completed'))).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(3_000);
    await expect(pending).resolves.toMatchObject({ samples: expect.any(Array) });
  });

  it('drains the worker on the final rollout, cancelling in-flight groups', async () => {
    const { scheduler, run } = setup(
      'fully-async',
      (sample) => ({ delay: (sample.group_index ?? 0) < 4 ? 1 : 10_000 }),
      { numRollout: 1, asyncMaxActiveGroups: 6 },
    );
    const { metrics } = await scheduler.generateRollout(0);
    expect(metrics['dressage/fully_async_final_worker_drain']).toBe(1);
    expect(scheduler.pipeline).toEqual({ active: 0, activeSamples: 0, queued: 0, running: false });
    expect(run.cancelled.length).toBeGreaterThan(0);
  });

  it('leaves no timers or file handles behind after shutdown', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-shutdown-'));
    try {
      const file = join(directory, 'prompts.jsonl');
      await writeFile(
        file,
        promptRecords(32)
          .map((record) => JSON.stringify(record))
          .join('\n'),
      );
      const count = () =>
        process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout' || kind === 'FileHandle').length;
      const before = count();
      const dataSource = await PromptDataSource.fromJsonl(file, { nSamplesPerPrompt: 2 });
      const { scheduler, run } = setup('fully-async', () => ({ delay: 60_000 }), {}, dataSource);
      const pending = scheduler.generateRollout(0);
      // Keep the rejection handled while we wait; it is asserted after the shutdown below.
      pending.catch(() => undefined);
      // Wait (bounded) until the worker's generations hold timers: a loaded machine may take a while.
      for (let waited = 0; count() <= before && waited < 5_000; waited += 10) await tick(10);
      expect(count()).toBeGreaterThan(before);
      await scheduler.shutdown();
      await expect(pending).rejects.toMatchObject({ code: 'cancelled' });
      await tick(0);
      // Nothing this test started is left (other suites' timers may end meanwhile, never start).
      expect(count()).toBeLessThanOrEqual(before);
      expect(run.running()).toBe(0);
      await expect(scheduler.generateRollout(1)).rejects.toMatchObject({ code: 'cancelled' });
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });

  it('cancels one call through its signal without losing the groups it collected', async () => {
    const gate = createGate();
    const { scheduler } = setup('fully-async', (sample) =>
      (sample.group_index ?? 0) < 2 ? {} : { gate: gate.promise },
    );
    const controller = new AbortController();
    const pending = scheduler.generateRollout(0, { signal: controller.signal });
    // Groups 0 and 1 are collected; 2-5 hold the four slots.
    await until(() => scheduler.pipeline.active === 4 && scheduler.pipeline.queued === 0);
    controller.abort();
    await expect(pending).rejects.toMatchObject({ code: 'cancelled' });
    gate.open();
    const { samples } = await scheduler.generateRollout(0);
    expect(groupIndexes(samples)).toEqual([0, 1, 2, 3]);
  });

  it('refuses a second call while one is collecting', async () => {
    const { scheduler } = setup('fully-async', () => ({ delay: 5 }));
    const first = scheduler.generateRollout(0);
    await expect(scheduler.generateRollout(1)).rejects.toMatchObject({ code: 'failed_precondition' });
    await expect(first).resolves.toMatchObject({ samples: expect.any(Array) });
  });

  it('backs off while the data source returns no groups, and serves them once it has some', async () => {
    // A custom source that ran dry: it answers [] until groups are added. Asked in a tight loop,
    // the worker would answer every call in a microtask and no timer (nor socket) would ever run.
    const inner = PromptDataSource.fromRecords(promptRecords(4), { nSamplesPerPrompt: 2 });
    let dry = true;
    let emptyAnswers = 0;
    const dataSource: RolloutDataSource = {
      async getSamples(count: number) {
        if (dry) {
          emptyAnswers++;
          // Fail loudly rather than hang the test if the worker spins.
          if (emptyAnswers > 1000) throw new Error('the worker asked an empty source 1000 times');
          return [];
        }
        return inner.getSamples(count);
      },
      addSamples: (groups: readonly (readonly Sample[])[]) => inner.addSamples(groups),
    };
    const { scheduler, logger } = setup('fully-async', () => ({}), {}, dataSource);
    const rollout = scheduler.generateRollout(0);
    await tick(200);
    // 10, 20, 40, 80 ms: a handful of questions in 200 ms, not thousands.
    expect(emptyAnswers).toBeGreaterThan(1);
    expect(emptyAnswers).toBeLessThan(10);
    expect(logger.warnings.some((warning) => warning.includes('returned no samples'))).toBe(true);
    dry = false;
    const { samples } = await rollout;
    expect(groupIndexes(samples)).toEqual([0, 1, 2, 3]);
  });

  it('propagates a bad prompt line from the data source', async () => {
    const dataSource = PromptDataSource.fromRecords([{ prompt: 'ok' }, { label: 'no prompt' }]);
    const { scheduler } = setup('fully-async', () => ({}), { nSamplesPerPrompt: 1 }, dataSource);
    await expect(scheduler.generateRollout(0)).rejects.toThrow(/record 2: prompt/);
  });
});

describe('staleness filter', () => {
  it('drops groups that ended on a version older than the newest N, re-filtering the pending batch', async () => {
    // Versions by group: 0, 1 and 3 end on A; the others on B. Gates decide the finishing order.
    const slowStale = createGate();
    const late = createGate();
    const { scheduler } = setup(
      'fully-async',
      (sample) => {
        const group = sample.group_index ?? 0;
        const version = group <= 1 || group === 3 ? 'A' : 'B';
        if (group === 3) return { version, gate: slowStale.promise };
        return group >= 5 ? { version, gate: late.promise } : { version };
      },
      { rolloutBatchSize: 2, asyncMaxActiveGroups: 2, stalenessKeepVersions: 1 },
    );
    const first = await scheduler.generateRollout(0);
    expect(groupIndexes(first.samples)).toEqual([0, 1]);
    const second = await scheduler.generateRollout(1);
    expect(groupIndexes(second.samples)).toEqual([2, 4]);
    expect(second.metrics['staleness/current_version_index']).toBe(1);
    expect(second.metrics['staleness/cutoff_version_index']).toBe(1);
    // Group 3 finishes on A after B was seen: it is stale and dropped by the next call.
    slowStale.open();
    await until(() => scheduler.pipeline.queued === 1);
    const third = scheduler.generateRollout(2);
    late.open();
    const { samples, metrics } = await third;
    expect(metrics['staleness/dropped_groups']).toBe(1);
    expect(groupIndexes(samples)).toEqual([5, 6]);
    expect(metrics['staleness/version_gap_max']).toBe(0);
    expect(metrics['staleness/version_span_max']).toBe(1);
  });

  it('measures gaps to the version the trainer holds, dropping groups beyond the bound before any rollout ends on it', async () => {
    // The engine serves v1 until group 8; later groups end on v3.
    const { scheduler } = setup(
      'fully-async',
      (sample) => ({ version: (sample.group_index ?? 0) >= 8 ? 'v3' : 'v1' }),
      { rolloutBatchSize: 2, asyncMaxActiveGroups: 2, stalenessKeepVersions: 2 },
    );
    const first = await scheduler.generateRollout(0, { weightVersion: 'v1' });
    expect(first.metrics['staleness/version_gap_max']).toBe(0);
    // One update later, groups of v1 are one version behind: kept, with an honest gap of 1 (the
    // newest version any rollout ended on is still v1).
    const second = await scheduler.generateRollout(1, { weightVersion: 'v2' });
    expect(groupIndexes(second.samples)).toEqual([2, 3]);
    expect(second.metrics['staleness/version_gap_mean']).toBe(1);
    expect(second.metrics['staleness/current_version_index']).toBe(1);
    // Two updates later, groups of v1 are beyond keep_versions 2 and dropped.
    const third = await scheduler.generateRollout(2, { weightVersion: 'v3' });
    expect(groupIndexes(third.samples)).toEqual([8, 9]);
    expect(third.metrics['staleness/dropped_groups']).toBe(4);
    expect(third.metrics['staleness/version_gap_max']).toBe(0);
    expect(scheduler.staleness.versions).toEqual(['v1', 'v2', 'v3']);
  });

  it('reports no staleness/* metric of its own when staleness control is off', async () => {
    const { scheduler } = setup('fully-async', () => ({ version: 'A' }));
    const { metrics } = await scheduler.generateRollout(0, { weightVersion: 'B' });
    const staleness = Object.keys(metrics).filter((name) => name.startsWith('staleness/'));
    // Only the multi-segment version span (of the trajectories themselves) remains, as the reference.
    expect(staleness.sort()).toEqual([
      'staleness/version_span_max',
      'staleness/version_span_mean',
      'staleness/version_span_min',
    ]);
  });

  it('does not let a failed group that will be retried advance the version', async () => {
    const { scheduler } = setup(
      'fully-async',
      (sample, context) =>
        sample.group_index === 0 && context.attempt === 0
          ? { fail: 'aborted', version: 'B' }
          : { version: 'A' },
      { stalenessKeepVersions: 1 },
    );
    const { samples, metrics } = await scheduler.generateRollout(0);
    expect(samples).toHaveLength(4);
    expect(metrics['staleness/dropped_groups']).toBe(0);
    expect(scheduler.staleness.versions).toEqual(['A']);
  });
});

describe('rollout budget and recall of stale groups', () => {
  it('counts the sample budget per call: a finished sample frees its place while its sibling runs', async () => {
    const straggler = createGate();
    let peak = 0;
    const { scheduler, run } = setup(
      'fully-async',
      (sample) => {
        peak = Math.max(peak, run.running() + 1);
        // The second sample of each group waits; the first finishes at once.
        return (sample.index ?? 0) % 2 === 1 ? { gate: straggler.promise } : {};
      },
      { asyncMaxActiveSamples: 4 },
    );
    const pending = scheduler.generateRollout(0);
    // Three groups in flight on a budget of two groups' samples: each finished sample made room.
    await until(() => scheduler.pipeline.active === 3 && scheduler.pipeline.activeSamples === 3);
    expect(peak).toBeLessThanOrEqual(4);
    straggler.open();
    const { samples } = await pending;
    expect(samples).toHaveLength(4);
    expect(peak).toBeLessThanOrEqual(4);
  });

  it('generates no further ahead than the outstanding-group limit', async () => {
    const { scheduler } = setup('fully-async', () => ({}), {
      rolloutBatchSize: 2,
      asyncMaxOutstandingGroups: 3,
    });
    await scheduler.generateRollout(0);
    await tick(20);
    expect(scheduler.pipeline.active + scheduler.pipeline.queued).toBe(3);
  });

  it('recalls a group in flight that a finished sample rules out, and generates its prompt again', async () => {
    let engine = 'v1';
    const straggler = createGate();
    const { scheduler, run, discarder } = setup(
      'fully-async',
      (sample, context) =>
        // Group 2's second sample runs long on its first attempt; its retry ends on v3.
        sample.group_index === 2 && context.attempt === 1
          ? { version: 'v3' }
          : sample.index === 5
            ? { version: engine, gate: straggler.promise }
            : { version: engine },
      {
        rolloutBatchSize: 2,
        asyncMaxActiveGroups: 3,
        asyncMaxOutstandingGroups: 3,
        stalenessKeepVersions: 2,
        stalenessRecallInFlight: true,
      },
    );
    const first = await scheduler.generateRollout(0, { weightVersion: 'v1' });
    expect(groupIndexes(first.samples)).toEqual([0, 1]);
    await until(() => scheduler.pipeline.queued === 2);
    // Group 2's finished sample ended on v1: usable while the trainer holds v2, not after.
    engine = 'v2';
    const second = await scheduler.generateRollout(1, { weightVersion: 'v2' });
    expect(groupIndexes(second.samples)).toEqual([3, 4]);
    // Once that batch is full, group 2 could only be trained on v3: it is stopped, not finished.
    await until(() => run.cancelled.includes(5) && discarder.discarded.length >= 2);
    expect(discarder.discarded).toEqual(expect.arrayContaining(['s4-0', 's5-0']));
    engine = 'v3';
    const third = await scheduler.generateRollout(2, { weightVersion: 'v3' });
    engine = 'v4';
    const later = [third, await scheduler.generateRollout(3, { weightVersion: 'v4' })];
    expect(later.reduce((sum, { metrics }) => sum + (metrics['staleness/recalled_groups'] ?? 0), 0)).toBe(1);
    const trained = [first, second, ...later].flatMap(({ samples }) => samples.flat());
    // The prompt came back as a retry and was trained on; the recalled attempt never was.
    expect(run.calls.filter((call) => call.group === 2).map((call) => call.attempt)).toEqual([0, 0, 1, 1]);
    expect(trained.filter((sample) => sample.group_index === 2).map((sample) => sample.session_id)).toEqual([
      's4-1',
      's5-1',
    ]);
    straggler.open();
  });
});

describe('partial-async scheduler', () => {
  it('returns the target groups and carries the rest over with provenance metadata', async () => {
    const { scheduler } = setup('partial-async', () => ({}), {
      globalBatchSize: 4,
      numRollout: 3,
      asyncMaxActiveGroups: 1,
      asyncOutputQueueSize: 5,
    });
    const first = await scheduler.generateRollout(0);
    expect(first.metrics['dressage/partial_rollout_target_groups']).toBe(2);
    expect(first.metrics['dressage/partial_rollout_target_samples']).toBe(4);
    expect(first.metrics['dressage/partial_rollout_full_groups']).toBe(4);
    expect(groupIndexes(first.samples)).toEqual([0, 1]);
    // The worker keeps going between calls: groups 2.. are submitted during rollout 0.
    await until(() => scheduler.pipeline.queued === 4);
    const second = await scheduler.generateRollout(1);
    expect(groupIndexes(second.samples)).toEqual([2, 3]);
    for (const sample of second.samples.flat()) {
      expect(sample.metadata).toMatchObject({
        dressage_start_rollout_id: 0,
        dressage_partial_rollout: true,
        dressage_return_rollout_id: 1,
        dressage_partial_rollout_returned: true,
      });
      expect(sample.metadata.dressage_return_async_group_id).toBe(sample.metadata.dressage_async_group_id);
    }
    // Let the worker fill its queue to the 80% mark (4 groups): the final call returns 2 and drains 2.
    await until(() => scheduler.pipeline.queued === 4);
    const final = await scheduler.generateRollout(2);
    expect(final.metrics['dressage/partial_rollout_queued_completed_groups']).toBe(2);
    expect(final.metrics['dressage/partial_rollout_final_worker_drain']).toBe(1);
    expect(final.metrics['dressage/partial_rollout_drained_completed_groups']).toBe(2);
    expect(scheduler.pipeline.running).toBe(false);
  });

  it('counts staleness rejections and keeps the first rollout id across retries', async () => {
    const { scheduler } = setup(
      'partial-async',
      (sample, context) =>
        sample.group_index === 0 && context.attempt === 0
          ? { fail: 'throw', message: `proxy said ${PARTIAL_ROLLOUT_STALENESS_MARKER}` }
          : {},
      { partialRolloutTargetGroups: 4 },
    );
    const { samples, metrics } = await scheduler.generateRollout(7);
    expect(metrics['staleness/partial_rollout_rejected_groups']).toBe(1);
    expect(metrics['staleness/partial_rollout_rejected_samples']).toBe(2);
    expect(metrics['dressage/partial_rollout_retried_groups']).toBe(1);
    const retried = samples.find((group) => group[0]?.group_index === 0) ?? [];
    expect(retried[0]?.metadata.dressage_start_rollout_id).toBe(7);
    expect(retried[0]?.metadata.dressage_retry_count).toBe(1);
  });

  it('guards against an empty train batch', async () => {
    const { scheduler } = setup('partial-async', () => ({ untrainable: true }));
    await expect(scheduler.generateRollout(0)).rejects.toThrow(/no trainable samples/);
  });
});
