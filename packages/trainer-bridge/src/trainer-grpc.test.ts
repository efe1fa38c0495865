import {
  DressageError,
  HealthStatus,
  type PackedTrainBatch,
  type TrainBatchHeader,
  type TrainChunk,
} from '@dressage/protocol';
import { trainBatchToChunks } from '@dressage/protocol/internal';
import { afterEach, describe, expect, it } from 'vitest';
import { createSyntheticTrainBatch } from './synthetic-batch.js';
import { createTrainerClient, type TrainerClient } from './trainer-client.js';
import {
  type RunningTrainerServer,
  type StartTrainerServerOptions,
  startTrainerServer,
  type TrainerImplementation,
} from './trainer-server.js';

const columns = [
  'tokens',
  'total_lengths',
  'response_lengths',
  'loss_masks',
  'rollout_log_probs',
  'rollout_ids',
  'rewards',
  'raw_rewards',
  'rollout_mask_sums',
  'truncated',
  'sample_indices',
] as const;

function bytesOf(array: ArrayBufferView | null): Buffer {
  if (array === null) return Buffer.alloc(0);
  return Buffer.from(array.buffer, array.byteOffset, array.byteLength);
}

function fakeTrainer(overrides: Partial<TrainerImplementation> = {}): TrainerImplementation {
  return {
    getInfo: () => ({ trainer_kind: 'embedded', model_name: 'fake', backend: 'cpu', vocab_size: 151_000 }),
    train: (_header, batch) => ({ samples_trained: batch.sample_count, tokens_trained: batch.tokens.length }),
    updateWeights: (request) => ({ weight_version: request.weight_version || '1', engines_updated: 1 }),
    saveCheckpoint: (request) => ({
      path: request.path,
      rollout_id: request.rollout_id,
      weight_version: '1',
    }),
    loadCheckpoint: (request) => ({ path: request.path, rollout_id: 3, weight_version: '1' }),
    ...overrides,
  };
}

const servers: RunningTrainerServer[] = [];
const clients: TrainerClient[] = [];

async function serve(
  implementation: TrainerImplementation,
  options: StartTrainerServerOptions = {},
): Promise<{ server: RunningTrainerServer; client: TrainerClient }> {
  const server = await startTrainerServer(implementation, options);
  servers.push(server);
  const client = createTrainerClient(server.address);
  clients.push(client);
  return { server, client };
}

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  for (const server of servers.splice(0)) await server.close(100);
});

async function rejection(promise: Promise<unknown>): Promise<DressageError> {
  try {
    await promise;
  } catch (error) {
    expect(DressageError.isInstance(error)).toBe(true);
    return error as DressageError;
  }
  throw new Error('expected the call to fail');
}

describe('TrainerService over gRPC, TS client to TS server', () => {
  it('streams a batch of more than 8M tokens and reassembles it field by field', async () => {
    const sent = createSyntheticTrainBatch({ samples: 2048, tokensPerSample: 4096, responseTokens: 1024 });
    expect(sent.tokens.length).toBeGreaterThanOrEqual(8_000_000);
    let received: { header: TrainBatchHeader; batch: PackedTrainBatch } | null = null;
    const { client } = await serve(
      fakeTrainer({
        train: (header, batch) => {
          received = { header, batch };
          return {
            samples_trained: batch.sample_count,
            tokens_trained: batch.tokens.length,
            metrics: { loss: 0.5 },
          };
        },
      }),
    );
    const response = await client.train(sent, {
      batch_id: 'big',
      rollout_id: 7,
      loss: { eps_clip: 0.2, use_tis: true },
    });
    expect(response).toMatchObject({ batch_id: 'big', rollout_id: 7, samples_trained: 2048 });
    expect(response.tokens_trained).toBe(sent.tokens.length);
    expect(response.metrics).toEqual({ loss: 0.5 });
    const { header, batch } = received as unknown as { header: TrainBatchHeader; batch: PackedTrainBatch };
    expect(header).toMatchObject({
      batch_id: 'big',
      rollout_id: 7,
      sample_count: 2048,
      global_batch_size: 512,
    });
    expect(header.loss).toMatchObject({ eps_clip: 0.2, use_tis: true });
    expect(header.loss?.tis_clip).toBeUndefined();
    expect(batch.sample_count).toBe(sent.sample_count);
    expect(batch.teacher_log_probs).toBeNull();
    for (const column of columns) {
      expect(bytesOf(batch[column]).equals(bytesOf(sent[column])), column).toBe(true);
    }
  });

  it('sends the same batch with direct framing off and through a compressing channel', async () => {
    const sent = createSyntheticTrainBatch({ samples: 64, tokensPerSample: 300, responseTokens: 100 });
    const received: PackedTrainBatch[] = [];
    const { server } = await serve(
      fakeTrainer({
        train: (_header, batch) => {
          received.push(batch);
          return { samples_trained: batch.sample_count, tokens_trained: batch.tokens.length };
        },
      }),
    );
    const plain = createTrainerClient(server.address, { directFraming: false });
    // gzip: grpc-js needs the message bytes, so the client frames the usual way.
    const gzip = createTrainerClient(server.address, {
      channelOptions: { 'grpc.default_compression_algorithm': 2 },
    });
    clients.push(plain, gzip);
    await plain.train(sent, {}, { maxChunkBytes: 8_000 });
    await gzip.train(sent, {}, { maxChunkBytes: 8_000 });
    expect(received).toHaveLength(2);
    for (const batch of received) {
      for (const column of columns) {
        expect(bytesOf(batch[column]).equals(bytesOf(sent[column])), column).toBe(true);
      }
    }
  });

  it('passes the unary calls through and reports BUSY while training', async () => {
    let release: () => void = () => {};
    let entered: () => void = () => {};
    const inTraining = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const { client } = await serve(
      fakeTrainer({
        train: async (_header, batch) => {
          entered();
          await new Promise<void>((resolve) => {
            release = resolve;
          });
          return { samples_trained: batch.sample_count };
        },
      }),
    );
    expect(await client.getInfo()).toMatchObject({ trainer_kind: 'embedded', vocab_size: 151_000 });
    expect((await client.health()).status).toBe(HealthStatus.STATUS_SERVING);
    const training = client.train(
      createSyntheticTrainBatch({ samples: 4, tokensPerSample: 32, responseTokens: 8 }),
    );
    await inTraining;
    expect((await client.health()).status).toBe(HealthStatus.STATUS_BUSY);
    release();
    expect((await training).samples_trained).toBe(4);
    expect(await client.updateWeights({ weight_version: '9' })).toMatchObject({ weight_version: '9' });
    expect(await client.saveCheckpoint({ path: '/tmp/x', rollout_id: 2 })).toMatchObject({
      path: '/tmp/x',
      rollout_id: 2,
    });
    expect(await client.loadCheckpoint({ path: '/tmp/x' })).toMatchObject({ rollout_id: 3 });
  });

  it('answers a rejected batch with the trainer code, message and details', async () => {
    const { client } = await serve(
      fakeTrainer({
        train: () => {
          throw new DressageError({
            code: 'invalid_argument',
            message: 'token id 999999 is outside the vocabulary',
            details: { sample: 3, modèle: 'tiny' },
          });
        },
      }),
    );
    const error = await rejection(
      client.train(createSyntheticTrainBatch({ samples: 8, tokensPerSample: 16, responseTokens: 4 })),
    );
    expect(error.code).toBe('invalid_argument');
    expect(error.message).toContain('rejected Train: token id 999999 is outside the vocabulary');
    expect(error.details).toMatchObject({ sample: 3, modèle: 'tiny', method: 'Train' });
    expect(error.isRetryable).toBe(false);
  });

  it('fails with unavailable when no trainer listens', async () => {
    const probe = await startTrainerServer(fakeTrainer());
    const address = probe.address;
    await probe.close(0);
    const client = createTrainerClient(address, { deadlineMs: 10_000 });
    clients.push(client);
    const error = await rejection(client.getInfo());
    expect(error.code).toBe('unavailable');
    expect(error.message).toContain(`The trainer at ${address} is unreachable`);
    expect(error.isRetryable).toBe(true);
    const trainError = await rejection(
      client.train(createSyntheticTrainBatch({ samples: 64, tokensPerSample: 1024, responseTokens: 256 })),
    );
    expect(trainError.code).toBe('unavailable');
    await expect(client.waitForReady(200)).rejects.toMatchObject({ code: 'unavailable' });
  });

  it('rejects a chunk larger than the server accepts with resource_exhausted', async () => {
    const { client } = await serve(fakeTrainer(), { maxMessageBytes: 1024 * 1024 });
    const batch = createSyntheticTrainBatch({ samples: 16, tokensPerSample: 65_536, responseTokens: 1024 });
    const error = await rejection(client.train(batch, {}, { maxChunkBytes: 4 * 1024 * 1024 }));
    expect(error.code).toBe('resource_exhausted');
    expect(error.message).toContain('maxMessageBytes');
    // The same batch in chunks under the limit goes through.
    const response = await client.train(batch, {}, { maxChunkBytes: 512 * 1024 });
    expect(response.samples_trained).toBe(16);
  });

  it('rejects a batch above the announced-size limit before it is streamed', async () => {
    const { client } = await serve(fakeTrainer(), { maxBatchTokens: 1000 });
    const error = await rejection(
      client.train(createSyntheticTrainBatch({ samples: 64, tokensPerSample: 512, responseTokens: 64 })),
    );
    expect(error.code).toBe('resource_exhausted');
    expect(error.message).toContain('accepts at most');
  });

  // Streams a small batch whose header `edit` changes, with the raw grpc-js call.
  async function trainWithHeader(
    edit: (header: TrainBatchHeader) => void,
  ): Promise<{ code: number; details: string }> {
    const { client } = await serve(fakeTrainer());
    const batch = createSyntheticTrainBatch({ samples: 4, tokensPerSample: 16, responseTokens: 4 });
    const chunks = trainBatchToChunks(batch, {
      batch_id: 'edited',
      rollout_id: 0,
      global_batch_size: 1,
      expected_weight_version: '',
    });
    return new Promise((resolve) => {
      const call = client.grpcClient.train((failure) =>
        resolve(failure as unknown as { code: number; details: string }),
      );
      const header = chunks[0] as TrainChunk;
      if (header.payload?.$case === 'header') edit(header.payload.value);
      call.write(header);
      for (const chunk of chunks.slice(1)) call.write(chunk);
      call.end();
    });
  }

  it('rejects a malformed stream with invalid_argument', async () => {
    const error = await trainWithHeader((header) => {
      header.sample_count = 5;
    });
    expect(error.code).toBe(3);
    expect(error.details).toContain('header announced 5');
  });

  it('answers a header claiming an enormous batch with invalid_argument, reserving nothing for it', async () => {
    const before = process.memoryUsage().arrayBuffers;
    // Within the default limits (2^31 - 1), far beyond what arrives: 8 GiB of tokens announced.
    const error = await trainWithHeader((header) => {
      header.token_count = 2 ** 31 - 1;
      header.sample_count = 2 ** 31 - 1;
      header.response_token_count = 2 ** 31 - 1;
    });
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(64 * 1024 ** 2);
    expect(error.code).toBe(3);
    expect(error.details).toContain('ended after 4 samples');
  });

  it('cancels a Train call: the client rejects with cancelled and the trainer sees its signal fire', async () => {
    let trainerSawAbort: Promise<unknown> = Promise.resolve();
    let entered: () => void = () => {};
    const inTraining = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const { client } = await serve(
      fakeTrainer({
        train: (_header, _batch, signal) => {
          trainerSawAbort = new Promise((resolve) =>
            signal.addEventListener('abort', () => resolve(signal.reason)),
          );
          entered();
          return new Promise(() => {});
        },
      }),
    );
    const controller = new AbortController();
    const training = client.train(
      createSyntheticTrainBatch({ samples: 32, tokensPerSample: 256, responseTokens: 64 }),
      {},
      {
        signal: controller.signal,
      },
    );
    await inTraining;
    controller.abort();
    const error = await rejection(training);
    expect(error.code).toBe('cancelled');
    expect(await trainerSawAbort).toMatchObject({ code: 'cancelled' });
    // An already aborted signal never starts the call.
    await expect(client.getInfo({ signal: controller.signal })).rejects.toMatchObject({ code: 'cancelled' });
  });

  it('cancels a stream while it is still being sent', async () => {
    const { client } = await serve(fakeTrainer());
    const controller = new AbortController();
    const batch = createSyntheticTrainBatch({ samples: 512, tokensPerSample: 4096, responseTokens: 512 });
    const training = client.train(batch, {}, { signal: controller.signal, maxChunkBytes: 64 * 1024 });
    controller.abort();
    expect((await rejection(training)).code).toBe('cancelled');
  });

  it('fails with deadline_exceeded when the trainer overruns the deadline', async () => {
    const { client } = await serve(fakeTrainer({ getInfo: () => new Promise(() => {}) }));
    const error = await rejection(client.getInfo({ deadlineMs: 100 }));
    expect(error.code).toBe('deadline_exceeded');
  });
});
