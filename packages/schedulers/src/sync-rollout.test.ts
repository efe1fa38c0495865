import { DressageError, SampleStatus } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { promptRecords, recordingDiscarder, scriptedGenerate } from './__fixtures__/generators.js';
import { PromptDataSource } from './data-source.js';
import { resolveSchedulerOptions, type SchedulerOptionsInput } from './options.js';
import { SyncRolloutScheduler } from './sync-rollout.js';

function setup(
  script: Parameters<typeof scriptedGenerate>[0],
  options: Partial<SchedulerOptionsInput> = {},
  prompts = 8,
) {
  const dataSource = PromptDataSource.fromRecords(promptRecords(prompts), { nSamplesPerPrompt: 2 });
  const run = scriptedGenerate(script);
  const discarder = recordingDiscarder();
  const scheduler = new SyncRolloutScheduler(
    { dataSource, generate: run.generate, sessionDiscarder: discarder },
    resolveSchedulerOptions({ rolloutBatchSize: 4, nSamplesPerPrompt: 2, ...options }, { env: {} }),
  );
  return { dataSource, run, discarder, scheduler };
}

describe('SyncRolloutScheduler', () => {
  it('returns exactly rolloutBatchSize groups sorted by index, whatever the finishing order', async () => {
    const { scheduler } = setup((sample) => ({ delay: 12 - 2 * (sample.index ?? 0) }));
    const { samples, metrics } = await scheduler.generateRollout(0);
    expect(samples.map((group) => group.map((sample) => sample.index))).toEqual([
      [0, 1],
      [2, 3],
      [4, 5],
      [6, 7],
    ]);
    expect(samples.flat().every((sample) => sample.status === SampleStatus.COMPLETED)).toBe(true);
    expect(metrics['rollout/num_trajectories']).toBe(8);
    expect(metrics['dressage/sync_rollout_retried_groups']).toBe(0);
  });

  it('flattens multi-segment results', async () => {
    const { scheduler } = setup(() => ({ segments: 3 }));
    const { samples, metrics } = await scheduler.generateRollout(0);
    expect(samples[0]).toHaveLength(6);
    expect(metrics['rollout/segments_per_trajectory_mean']).toBe(3);
    expect(metrics['rollout/num_segments']).toBe(24);
  });

  it('retries a failed group at once with retry bookkeeping and discards the failed sessions', async () => {
    const { scheduler, run, discarder } = setup((sample, context) =>
      sample.group_index === 1 && context.attempt === 0 ? { fail: 'throw' } : {},
    );
    const { samples, metrics } = await scheduler.generateRollout(3);
    const retried = samples[1] ?? [];
    expect(retried.map((sample) => sample.metadata.dressage_retry_count)).toEqual([1, 1]);
    expect(retried.map((sample) => sample.metadata.last_retry_session_id)).toEqual(['s2-0', 's3-0']);
    expect(retried.map((sample) => sample.session_id)).toEqual(['s2-1', 's3-1']);
    expect(metrics['dressage/sync_rollout_retried_groups']).toBe(1);
    await scheduler.shutdown();
    expect(discarder.discarded.sort()).toEqual(['s2-0', 's3-0']);
    expect(run.calls.filter((call) => call.group === 1).map((call) => call.attempt)).toEqual([0, 0, 1, 1]);
    expect(run.calls.every((call) => call.rolloutId === 3)).toBe(true);
  });

  it('keeps exhausted groups as no-grad placeholders', async () => {
    const { scheduler, run } = setup((sample) => (sample.group_index === 2 ? { fail: 'aborted' } : {}), {
      maxRetries: 1,
    });
    const { samples, metrics } = await scheduler.generateRollout(0);
    expect(samples).toHaveLength(4);
    const placeholders = samples[2] ?? [];
    expect(placeholders).toHaveLength(2);
    for (const sample of placeholders) {
      expect(sample).toMatchObject({
        remove_sample: true,
        status: SampleStatus.FAILED,
        reward: 0,
        response_length: 0,
        loss_mask: [],
        rollout_log_probs: [],
        session_id: null,
      });
      expect(sample.metadata.instance_id).toBe('i2');
      expect(sample.metadata.last_failed_session_id).toMatch(/^s[45]-1$/);
      expect(sample.metadata.parent_traj_id).toBe(sample.metadata.last_failed_session_id);
    }
    expect(metrics['dressage/sync_rollout_failed_groups']).toBe(1);
    expect(run.calls.filter((call) => call.group === 2)).toHaveLength(4);
  });

  it('treats an empty result as a failure and uses an injected markAbortedNoGrad', async () => {
    const dataSource = PromptDataSource.fromRecords(promptRecords(2));
    const run = scriptedGenerate((sample) => (sample.index === 0 ? { fail: 'empty' } : {}));
    const scheduler = new SyncRolloutScheduler(
      {
        dataSource,
        generate: run.generate,
        markAbortedNoGrad: (sample) => ({ ...sample, remove_sample: true, response: 'placeholder' }),
      },
      resolveSchedulerOptions({ rolloutBatchSize: 2, maxRetries: 0 }, { env: {} }),
    );
    const { samples } = await scheduler.generateRollout(0);
    expect(samples[0]?.[0]?.response).toBe('placeholder');
  });

  it('fails when the data source cannot fill the batch', async () => {
    const scheduler = new SyncRolloutScheduler(
      {
        dataSource: { getSamples: async () => [], addSamples: () => {} },
        generate: scriptedGenerate().generate,
      },
      resolveSchedulerOptions({ rolloutBatchSize: 2 }, { env: {} }),
    );
    await expect(scheduler.generateRollout(0)).rejects.toThrow(/needs exactly 2/);
  });

  it('guards against an empty train batch unless allowed', async () => {
    const all = setup(() => ({ fail: 'throw' }), { maxRetries: 0 });
    const error = await all.scheduler.generateRollout(0).catch((caught: unknown) => caught);
    expect(DressageError.isInstance(error) && error.code).toBe('failed_precondition');
    expect((error as Error).message).toMatch(/produced no trainable samples/);

    const untrainable = setup(() => ({ untrainable: true }));
    await expect(untrainable.scheduler.generateRollout(0)).rejects.toThrow(/no trainable samples/);

    const allowed = setup(() => ({ fail: 'throw' }), { maxRetries: 0, allowEmptyTrainBatch: true });
    expect((await allowed.scheduler.generateRollout(0)).samples).toHaveLength(4);
  });

  it('cancels in-flight rollouts through the call signal and on shutdown', async () => {
    const { scheduler, run } = setup(() => ({ delay: 10_000 }));
    const controller = new AbortController();
    const pending = scheduler.generateRollout(0, { signal: controller.signal });
    await new Promise((resolve) => setTimeout(resolve, 5));
    controller.abort();
    await expect(pending).rejects.toMatchObject({ code: 'cancelled' });
    expect(run.cancelled).toHaveLength(8);

    const second = scheduler.generateRollout(1);
    await new Promise((resolve) => setTimeout(resolve, 5));
    await scheduler.shutdown();
    await expect(second).rejects.toMatchObject({ code: 'cancelled' });
    await expect(scheduler.generateRollout(2)).rejects.toMatchObject({ code: 'cancelled' });
  });
});
