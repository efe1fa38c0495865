import { describe, expect, it } from 'vitest';
import {
  partialRolloutTarget,
  resolveSchedulerOptions,
  schedulerEnvironmentVariables,
  schedulerOptionsFromEnv,
} from './options.js';

describe('scheduler options', () => {
  it('has the reference defaults', () => {
    const options = resolveSchedulerOptions({ rolloutBatchSize: 4 }, { env: {} });
    expect(options).toMatchObject({
      nSamplesPerPrompt: 1,
      maxRetries: 2,
      allowEmptyTrainBatch: false,
      asyncOutputQueueSize: 1000,
      asyncNoProgressWarnSec: 600,
      asyncWorkerStopTimeoutSec: 300,
      drainFullyAsyncWorkerOnFinalRollout: true,
      drainPartialWorkerOnFinalRollout: true,
      stalenessKeepVersions: 0,
    });
  });

  it('reads every reference variable, with explicit options winning', () => {
    const env = {
      DRESSAGE_ROLLOUT_MAX_RETRIES: '5',
      DRESSAGE_ALLOW_EMPTY_TRAIN_BATCH: 'YES',
      DRESSAGE_ASYNC_MAX_ACTIVE_GROUPS: '16',
      DRESSAGE_ASYNC_OUTPUT_QUEUE_SIZE: '50',
      DRESSAGE_ASYNC_MAX_DROPPED_FAILED_GROUPS: '3',
      DRESSAGE_ASYNC_NO_PROGRESS_WARN_SEC: '1.5',
      DRESSAGE_ASYNC_WORKER_STOP_TIMEOUT_SEC: '10',
      DRESSAGE_DRAIN_FULLY_ASYNC_WORKER_ON_FINAL_ROLLOUT: '0',
      DRESSAGE_DRAIN_PARTIAL_WORKER_ON_FINAL_ROLLOUT: 'false',
      DRESSAGE_PARTIAL_ROLLOUT_TARGET_GROUPS: '2',
      DRESSAGE_PARTIAL_ROLLOUT_TARGET_SAMPLES: '8',
      DRESSAGE_ASYNC_MAX_ACTIVE_SAMPLES: '64',
      DRESSAGE_ASYNC_MAX_OUTSTANDING_GROUPS: '12',
      DRESSAGE_STALENESS_RECALL_IN_FLIGHT: 'on',
    };
    expect(Object.keys(env).sort()).toEqual(Object.keys(schedulerEnvironmentVariables).sort());
    expect(schedulerOptionsFromEnv(env)).toEqual({
      maxRetries: 5,
      allowEmptyTrainBatch: true,
      asyncMaxActiveGroups: 16,
      asyncOutputQueueSize: 50,
      asyncMaxDroppedFailedGroups: 3,
      asyncNoProgressWarnSec: 1.5,
      asyncWorkerStopTimeoutSec: 10,
      drainFullyAsyncWorkerOnFinalRollout: false,
      drainPartialWorkerOnFinalRollout: false,
      partialRolloutTargetGroups: 2,
      partialRolloutTargetSamples: 8,
      asyncMaxActiveSamples: 64,
      asyncMaxOutstandingGroups: 12,
      stalenessRecallInFlight: true,
    });
    const options = resolveSchedulerOptions({ rolloutBatchSize: 4, maxRetries: 1 }, { env });
    expect(options.maxRetries).toBe(1);
    expect(options.asyncMaxActiveGroups).toBe(16);
  });

  it('rejects values that do not parse, naming the variable or field', () => {
    expect(() => schedulerOptionsFromEnv({ DRESSAGE_ROLLOUT_MAX_RETRIES: 'two' })).toThrow(
      'DRESSAGE_ROLLOUT_MAX_RETRIES="two" is not an integer',
    );
    expect(() => schedulerOptionsFromEnv({ DRESSAGE_ALLOW_EMPTY_TRAIN_BATCH: 'maybe' })).toThrow(/boolean/);
    expect(() => schedulerOptionsFromEnv({ DRESSAGE_ASYNC_NO_PROGRESS_WARN_SEC: 'soon' })).toThrow(/number/);
    expect(() => resolveSchedulerOptions({ rolloutBatchSize: 0 }, { env: {} })).toThrow(/rolloutBatchSize/);
    expect(() =>
      resolveSchedulerOptions({ rolloutBatchSize: 2, stalenessKeepVersions: -1 }, { env: {} }),
    ).toThrow(/stalenessKeepVersions/);
    expect(schedulerOptionsFromEnv({ DRESSAGE_ROLLOUT_MAX_RETRIES: ' ' })).toEqual({});
  });

  it('computes the partial-async target', () => {
    const base = resolveSchedulerOptions({ rolloutBatchSize: 8, nSamplesPerPrompt: 4 }, { env: {} });
    expect(partialRolloutTarget(base)).toEqual({ groups: 8, samples: 32 });
    expect(partialRolloutTarget({ ...base, globalBatchSize: 16 })).toEqual({ groups: 4, samples: 16 });
    expect(partialRolloutTarget({ ...base, globalBatchSize: 64 })).toEqual({ groups: 8, samples: 32 });
    expect(partialRolloutTarget({ ...base, partialRolloutTargetGroups: 20 })).toEqual({
      groups: 8,
      samples: 32,
    });
    expect(partialRolloutTarget({ ...base, partialRolloutTargetGroups: 0 })).toEqual({
      groups: 1,
      samples: 4,
    });
    const uneven = partialRolloutTarget({ ...base, partialRolloutTargetSamples: 10 });
    expect(uneven.groups).toBe(3);
    expect(uneven.warning).toMatch(/not a multiple/);
  });
});
