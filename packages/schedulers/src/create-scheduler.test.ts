import { describe, expect, it } from 'vitest';
import { promptRecords, scriptedGenerate } from './__fixtures__/generators.js';
import { AsyncRolloutScheduler } from './async-rollout.js';
import { createRolloutScheduler } from './create-scheduler.js';
import { PromptDataSource } from './data-source.js';
import { SyncRolloutScheduler } from './sync-rollout.js';

describe('createRolloutScheduler', () => {
  it('builds each mode with options completed from the given environment', async () => {
    const dataSource = PromptDataSource.fromRecords(promptRecords(8));
    const { generate } = scriptedGenerate((_sample, context) =>
      context.attempt < 3 ? { fail: 'throw' } : {},
    );
    const env = { DRESSAGE_ROLLOUT_MAX_RETRIES: '3', DRESSAGE_PARTIAL_ROLLOUT_TARGET_GROUPS: '1' };
    const sync = createRolloutScheduler('sync', { dataSource, generate }, { rolloutBatchSize: 2 }, env);
    expect(sync).toBeInstanceOf(SyncRolloutScheduler);
    const { samples, metrics } = await sync.generateRollout(0);
    // Three failures, then success on the fourth try: the env's retry budget was used.
    expect(samples.flat().every((sample) => sample.metadata.dressage_retry_count === 3)).toBe(true);
    expect(metrics['dressage/sync_rollout_retried_groups']).toBe(6);

    const partial = createRolloutScheduler(
      'partial-async',
      { dataSource, generate },
      { rolloutBatchSize: 2 },
      env,
    );
    expect(partial).toBeInstanceOf(AsyncRolloutScheduler);
    expect((partial as AsyncRolloutScheduler).targetGroups()).toEqual({ groups: 1, samples: 1 });
    await partial.shutdown();
    await sync.shutdown();
    expect(() =>
      createRolloutScheduler(
        'fully-async',
        { dataSource, generate },
        { rolloutBatchSize: 2 },
        {
          DRESSAGE_ASYNC_OUTPUT_QUEUE_SIZE: 'lots',
        },
      ),
    ).toThrow('DRESSAGE_ASYNC_OUTPUT_QUEUE_SIZE="lots" is not an integer');
  });
});
