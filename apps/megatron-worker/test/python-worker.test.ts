import { DressageError, HealthStatus } from '@dressage/protocol';
import { createTrainerClient, type TrainerClient } from '@dressage/trainer-bridge';
import { createSyntheticTrainBatch } from '@dressage/trainer-bridge/internal';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorker, type WorkerProcess } from './worker-process.js';

async function rejection(promise: Promise<unknown>): Promise<DressageError> {
  try {
    await promise;
  } catch (error) {
    expect(DressageError.isInstance(error)).toBe(true);
    return error as DressageError;
  }
  throw new Error('expected the call to fail');
}

// The batch the worker's numpy check rebuilds: samples, tokens per sample, response tokens.
const BIG = { samples: 2048, tokensPerSample: 4096, responseTokens: 1024 };

describe('TS client ↔ Python worker', () => {
  let worker: WorkerProcess;
  let client: TrainerClient;

  beforeAll(async () => {
    worker = await startWorker([
      '--actor',
      'recording',
      '--verify',
      `${BIG.samples},${BIG.tokensPerSample},${BIG.responseTokens}`,
      '--max-batch-tokens',
      '50000000',
    ]);
    client = createTrainerClient(worker.address);
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await worker?.stop();
  });

  it('streams a batch of more than 8M tokens that numpy finds identical field by field', async () => {
    const batch = createSyntheticTrainBatch(BIG);
    expect(batch.tokens.length).toBeGreaterThanOrEqual(8_000_000);
    const response = await client.train(batch, { batch_id: 'big', rollout_id: 11, loss: { eps_clip: 0.2 } });
    expect(response).toMatchObject({ batch_id: 'big', rollout_id: 11, samples_trained: BIG.samples });
    expect(response.tokens_trained).toBe(batch.tokens.length);
    expect(response.metrics.mismatched_fields).toBe(0);
    expect(Object.keys(response.metrics).filter((key) => key.startsWith('mismatch/'))).toEqual([]);
  });

  it('notices a changed value (the check is not vacuous)', async () => {
    const batch = createSyntheticTrainBatch(BIG);
    batch.rewards[100] = 42;
    const response = await client.train(batch);
    expect(response.metrics.mismatched_fields).toBe(1);
    expect(response.metrics['mismatch/rewards']).toBe(1);
  });

  it('answers the unary calls', async () => {
    expect(await client.getInfo()).toMatchObject({ trainer_kind: 'recording', backend: 'numpy' });
    expect((await client.health()).status).toBe(HealthStatus.STATUS_SERVING);
    expect(await client.updateWeights({ engine_urls: ['http://engine:30000'] })).toMatchObject({
      engines_updated: 1,
    });
    expect(await client.saveCheckpoint({ path: '/tmp/none', rollout_id: 4 })).toMatchObject({
      rollout_id: 4,
    });
  });

  it('rejects a batch whose denominators are zero where tokens train, with invalid_argument', async () => {
    const batch = createSyntheticTrainBatch({ samples: 8, tokensPerSample: 64, responseTokens: 16 });
    batch.rollout_mask_sums[2] = 0;
    const error = await rejection(client.train(batch));
    expect(error.code).toBe('invalid_argument');
    expect(error.message).toContain('sample 2 has');
  });

  it('rejects an announced batch above the worker limit with resource_exhausted', async () => {
    const batch = createSyntheticTrainBatch({ samples: 13_000, tokensPerSample: 4096, responseTokens: 8 });
    const error = await rejection(client.train(batch));
    expect(error.code).toBe('resource_exhausted');
  });

  it('cancels a stream in flight', async () => {
    const controller = new AbortController();
    const training = client.train(
      createSyntheticTrainBatch(BIG),
      {},
      { signal: controller.signal, maxChunkBytes: 256 * 1024 },
    );
    setImmediate(() => controller.abort());
    expect((await rejection(training)).code).toBe('cancelled');
    // The worker keeps serving.
    expect((await client.health()).status).toBe(HealthStatus.STATUS_SERVING);
  });
});

describe('TS client ↔ Python worker, failures', () => {
  it('rejects a chunk above the worker message limit with resource_exhausted', async () => {
    const worker = await startWorker(['--actor', 'recording', '--max-message-bytes', String(1024 * 1024)]);
    const client = createTrainerClient(worker.address);
    try {
      const batch = createSyntheticTrainBatch({ samples: 64, tokensPerSample: 32_768, responseTokens: 64 });
      const error = await rejection(client.train(batch, {}, { maxChunkBytes: 4 * 1024 * 1024 }));
      expect(error.code).toBe('resource_exhausted');
      expect((await client.train(batch, {}, { maxChunkBytes: 256 * 1024 })).samples_trained).toBe(64);
    } finally {
      client.close();
      await worker.stop();
    }
  }, 60_000);

  it('reports unavailable once the worker is gone', async () => {
    const worker = await startWorker(['--actor', 'recording']);
    await worker.stop();
    const client = createTrainerClient(worker.address);
    try {
      const error = await rejection(client.getInfo());
      expect(error.code).toBe('unavailable');
      expect(error.message).toContain('unreachable');
    } finally {
      client.close();
    }
  }, 60_000);
});
