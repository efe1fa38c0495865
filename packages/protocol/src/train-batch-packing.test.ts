import {
  credentials,
  Server,
  ServerCredentials,
  type ServerReadableStream,
  type sendUnaryData,
  status,
} from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DressageError } from './errors.js';
import type { TrainBatch } from './schemas/train-batch.js';
import { type PackedTrainBatch, packTrainBatch, unpackTrainBatch } from './train-batch-packing.js';
import { TrainBatchAssembler, trainBatchFromChunks, trainBatchToChunks } from './train-batch-stream.js';
import { TrainChunk, TrainerServiceClient, TrainerServiceService, type TrainResponse } from './trainer.js';

// Deterministic pseudo-random numbers, so failures reproduce.
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

function randomBatch(samples: number, maxTokens: number, seed = 1): TrainBatch {
  const next = random(seed);
  const batch: TrainBatch = {
    tokens: [],
    response_lengths: [],
    rewards: [],
    raw_reward: [],
    truncated: [],
    sample_indices: [],
    rollout_ids: [],
    loss_masks: [],
    rollout_mask_sums: [],
    rollout_log_probs: [],
  };
  for (let i = 0; i < samples; i++) {
    const total = 1 + Math.floor(next() * maxTokens);
    const response = Math.floor(next() * (total + 1));
    batch.tokens.push(Array.from({ length: total }, () => Math.floor(next() * 151_936)));
    batch.response_lengths.push(response);
    const mask = Array.from({ length: response }, () => (next() < 0.7 ? 1 : 0)) as (0 | 1)[];
    batch.loss_masks.push(mask);
    batch.rollout_log_probs?.push(mask.map((value) => (value ? Math.fround(-next() * 5) : 0)));
    batch.rewards.push(Math.fround(next() * 2 - 1));
    batch.raw_reward.push(Math.fround(next()));
    batch.truncated.push(next() < 0.1 ? 1 : 0);
    batch.sample_indices.push(i);
    batch.rollout_ids.push(Math.floor(i / 3));
    batch.rollout_mask_sums.push(Math.round(next() * 1000) / 8);
  }
  return batch;
}

function catchError(run: () => unknown): DressageError {
  try {
    run();
  } catch (error) {
    if (DressageError.isInstance(error)) return error;
    throw error;
  }
  throw new Error('expected a DressageError');
}

const header = { batch_id: 'batch-1', rollout_id: 7, global_batch_size: 4, expected_weight_version: '3' };

describe('packTrainBatch / unpackTrainBatch', () => {
  it('round-trips a batch through typed arrays', () => {
    const batch = randomBatch(50, 300);
    const packed = packTrainBatch(batch);
    expect(packed.sample_count).toBe(50);
    expect(packed.tokens.length).toBe(batch.tokens.reduce((sum, tokens) => sum + tokens.length, 0));
    expect(packed.loss_masks.length).toBe(batch.response_lengths.reduce((sum, length) => sum + length, 0));
    const back = unpackTrainBatch(packed);
    const { total_lengths, ...rest } = back;
    expect(rest).toEqual(batch);
    expect(total_lengths).toEqual(batch.tokens.map((tokens) => tokens.length));
  });

  it('omits logprobs when the batch has none', () => {
    const { rollout_log_probs: _logprobs, ...batch } = randomBatch(3, 20);
    const packed = packTrainBatch(batch);
    expect(packed.rollout_log_probs).toBeNull();
    expect(unpackTrainBatch(packed).rollout_log_probs).toBeUndefined();
  });

  it('names the inconsistent field', () => {
    const batch = randomBatch(4, 20, 3);
    expect(catchError(() => packTrainBatch({ ...batch, rewards: [1] })).message).toContain(
      'rewards has 1 entries',
    );
    const masks = structuredClone(batch);
    masks.response_lengths[2] = (masks.tokens[2]?.length ?? 0) + 1;
    expect(catchError(() => packTrainBatch(masks)).message).toContain('response_lengths[2]');
    const logprobs = structuredClone(batch);
    logprobs.rollout_log_probs?.[1]?.push(0);
    expect(catchError(() => packTrainBatch(logprobs)).message).toContain('rollout_log_probs[1]');
  });
});

describe('Train stream chunks', () => {
  it('splits by size, never splitting a sample, and reassembles exactly after protobuf encoding', () => {
    const batch = randomBatch(120, 2000, 9);
    const packed = packTrainBatch(batch);
    const chunks = trainBatchToChunks(packed, header, { maxChunkBytes: 64 * 1024 });
    expect(chunks[0]?.payload?.$case).toBe('header');
    expect(chunks.length).toBeGreaterThan(3);
    // Through the real codec, as on the wire.
    const decoded = chunks.map((chunk) => TrainChunk.decode(TrainChunk.encode(chunk).finish()));
    const { header: received, batch: assembled } = trainBatchFromChunks(decoded);
    expect(received).toMatchObject({ ...header, sample_count: 120, token_count: packed.tokens.length });
    expectSameBatch(assembled, packed);
  });

  it('gives an oversized sample a block of its own', () => {
    const batch = randomBatch(3, 5000, 4);
    const chunks = trainBatchToChunks(packTrainBatch(batch), header, { maxChunkBytes: 16 });
    expect(chunks).toHaveLength(4);
  });

  it('handles an empty batch', () => {
    const packed = packTrainBatch(randomBatch(0, 1));
    const chunks = trainBatchToChunks(packed, header);
    expect(chunks).toHaveLength(1);
    expect(trainBatchFromChunks(chunks).batch.sample_count).toBe(0);
  });

  it('rejects malformed streams with a clear error', () => {
    const packed = packTrainBatch(randomBatch(10, 50, 5));
    const chunks = trainBatchToChunks(packed, header, { maxChunkBytes: 256 });
    expect(catchError(() => trainBatchFromChunks(chunks.slice(1))).message).toContain('before the header');
    expect(catchError(() => trainBatchFromChunks([chunks[0]!, chunks[0]!])).message).toContain(
      'second header',
    );
    expect(catchError(() => trainBatchFromChunks(chunks.slice(0, -1))).message).toMatch(/ended after/);
    expect(catchError(() => trainBatchFromChunks([])).message).toContain('without a header');

    const truncated = structuredClone(chunks);
    const block = truncated[1]?.payload;
    if (block?.$case !== 'samples') throw new Error('expected a sample block');
    block.value.tokens = block.value.tokens.subarray(0, block.value.tokens.length - 2);
    const error = catchError(() => trainBatchFromChunks(truncated));
    expect(error.code).toBe('data_loss');
    expect(error.message).toContain('samples block 0: tokens');

    const badMask = structuredClone(chunks);
    const maskBlock = badMask[1]?.payload;
    if (maskBlock?.$case !== 'samples') throw new Error('expected a sample block');
    if (maskBlock.value.loss_masks.length > 0) {
      maskBlock.value.loss_masks = Buffer.from(maskBlock.value.loss_masks).fill(2, 0, 1);
      expect(catchError(() => trainBatchFromChunks(badMask)).message).toContain('loss_masks[0] is 2');
    }

    const assembler = new TrainBatchAssembler();
    assembler.push(chunks[0]!);
    expect(catchError(() => assembler.push({ payload: undefined })).message).toContain('neither');
  });
});

describe('routed experts (MoE routing replay)', () => {
  // len(tokens) - 1 rows of 3 layers × 2 experts per sample, recorded as uint16 by the engine.
  function withRouted(batch: TrainBatch, dtype: 'uint8' | 'uint16' | 'int32' = 'uint16'): TrainBatch {
    const next = random(3);
    return {
      ...batch,
      rollout_routed_experts: batch.tokens.map((tokens) => {
        const rows = tokens.length - 1;
        return {
          rows,
          numLayers: 3,
          topk: 2,
          ids: Int32Array.from({ length: rows * 6 }, () => Math.floor(next() * 300)),
          dtype,
        };
      }),
    };
  }

  it('travel packed in the recorded dtype through the stream, block by block, and unpack exactly', () => {
    const batch = withRouted(randomBatch(40, 300, 12));
    const packed = packTrainBatch(batch);
    expect(packed.routed_experts?.dtype).toBe('uint16');
    expect(packed.routed_experts?.ids).toBeInstanceOf(Uint16Array);
    const chunks = trainBatchToChunks(packed, header, { maxChunkBytes: 2048 });
    expect(chunks.length).toBeGreaterThan(3);
    const decoded = chunks.map((chunk) => TrainChunk.decode(TrainChunk.encode(chunk).finish()));
    const { header: received, batch: assembled } = trainBatchFromChunks(decoded);
    expect(received.routed_experts).toEqual({ dtype: 'uint16', num_layers: 3, topk: 2 });
    expect(assembled.routed_experts?.ids).toEqual(packed.routed_experts?.ids);
    const unpacked = unpackTrainBatch(assembled).rollout_routed_experts as {
      rows: number;
      ids: Int32Array;
    }[];
    expect(unpacked.map((value) => value.rows)).toEqual(batch.tokens.map((tokens) => tokens.length - 1));
    expect(unpacked.map((value) => Array.from(value.ids))).toEqual(
      (batch.rollout_routed_experts as { ids: Int32Array }[]).map((value) => Array.from(value.ids)),
    );
  });

  it('refuse rows that do not match the tokens, mixed shapes and a block that disagrees with the header', () => {
    const batch = withRouted(randomBatch(4, 20, 2));
    const short = { ...batch, rollout_routed_experts: [...(batch.rollout_routed_experts as object[])] };
    const first = short.rollout_routed_experts[0] as { rows: number; ids: Int32Array };
    short.rollout_routed_experts[0] = { ...first, rows: first.rows - 1, ids: first.ids.subarray(6) };
    expect(catchError(() => packTrainBatch(short)).message).toMatch(
      /rollout_routed_experts\[0\] has \d+ rows but sample 0 needs \d+ \(len\(tokens\) - 1\)/,
    );
    const wide = withRouted(randomBatch(2, 20, 2), 'uint8');
    (wide.rollout_routed_experts![1] as { ids: Int32Array }).ids[0] = 256;
    expect(catchError(() => packTrainBatch(wide)).message).toContain('outside uint8');
    const chunks = trainBatchToChunks(packTrainBatch(batch), header);
    const block = chunks[1]!.payload as { $case: 'samples'; value: { routed_experts: Buffer } };
    block.value.routed_experts = block.value.routed_experts.subarray(2);
    expect(catchError(() => trainBatchFromChunks(chunks)).message).toContain('routed_experts');
  });
});

describe('TrainBatchAssembler', () => {
  it('reassembles from views into one shared buffer, and owns its copy', () => {
    const packed = packTrainBatch(randomBatch(37, 101, 11));
    const chunks = trainBatchToChunks(packed, header, { maxChunkBytes: 3000 });
    // Every column a view at an odd offset into one shared buffer, as a zero-copy decoder hands out.
    const decoded = chunks.map((chunk) => TrainChunk.decode(TrainChunk.encode(chunk).finish()));
    const columnBytes = Object.values(packed).reduce(
      (sum: number, value) => sum + (ArrayBuffer.isView(value) ? value.byteLength : 0),
      0,
    );
    const shared = Buffer.alloc(1 + columnBytes + 12 * decoded.length);
    let offset = 1;
    for (const chunk of decoded) {
      if (chunk.payload?.$case !== 'samples') continue;
      const block = chunk.payload.value as unknown as Record<string, unknown>;
      for (const [key, value] of Object.entries(block)) {
        if (!(value instanceof Uint8Array)) continue;
        shared.set(value, offset);
        block[key] = shared.subarray(offset, offset + value.byteLength);
        offset += value.byteLength + 1;
      }
    }
    const assembler = new TrainBatchAssembler();
    for (const chunk of decoded) assembler.push(chunk);
    const { batch } = assembler.finish();
    shared.fill(0xff);
    expectSameBatch(batch, packed);
    expect(assembler.finish().batch).toBe(batch);
  });

  it('keeps a single owned block in place where aligned, and copies otherwise', () => {
    const packed = packTrainBatch(randomBatch(9, 40, 5));
    const [head, only] = trainBatchToChunks(packed, header) as [TrainChunk, TrainChunk];
    if (only.payload?.$case !== 'samples') throw new Error('expected one sample block');
    // Every column at an 8-byte aligned offset of one buffer, as the trainer server's decoder leaves them.
    const block = only.payload.value as unknown as Record<string, unknown>;
    const shared = Buffer.alloc(64 * 1024);
    let offset = 0;
    for (const [key, value] of Object.entries(block)) {
      if (!(value instanceof Uint8Array)) continue;
      shared.set(value, offset);
      block[key] = shared.subarray(offset, offset + value.byteLength);
      offset += Math.ceil((value.byteLength + 1) / 8) * 8;
    }
    const adopting = new TrainBatchAssembler({ adoptBlockBytes: true });
    adopting.push(head);
    adopting.push(only);
    const adopted = adopting.finish().batch;
    expectSameBatch(adopted, packed);
    expect(adopted.tokens.buffer).toBe(shared.buffer);
    expect(adopted.rollout_mask_sums.buffer).toBe(shared.buffer);
    // Without ownership the same block is copied.
    const copied = trainBatchFromChunks([head, only]).batch;
    expectSameBatch(copied, packed);
    expect(copied.tokens.buffer).not.toBe(shared.buffer);
    // A misaligned column is copied into aligned memory even when owned.
    const tokens = block.tokens as Buffer;
    const odd = Buffer.alloc(tokens.byteLength + 1);
    odd.set(tokens, 1);
    block.tokens = odd.subarray(1);
    const misaligned = new TrainBatchAssembler({ adoptBlockBytes: true });
    misaligned.push(head);
    misaligned.push(only);
    const result = misaligned.finish().batch;
    expect(result.tokens.buffer).not.toBe(odd.buffer);
    expect(Array.from(result.tokens)).toEqual(Array.from(packed.tokens));
    // Several blocks are joined into fresh columns, even when owned.
    const several = new TrainBatchAssembler({ adoptBlockBytes: true });
    for (const chunk of trainBatchToChunks(packed, header, { maxChunkBytes: 300 })) several.push(chunk);
    expectSameBatch(several.finish().batch, packed);
  });

  it('reserves memory for the bytes that arrived, not for what the header claims', () => {
    const packed = packTrainBatch(randomBatch(3, 50, 4));
    const [head, ...blocks] = trainBatchToChunks(packed, header, { maxChunkBytes: 400 });
    if (head?.payload?.$case !== 'header') throw new Error('expected a header');
    // The same header, claiming a batch of 2^28 tokens and 2^24 samples (about 1.6 GB of columns).
    const claim = {
      ...head.payload.value,
      token_count: 2 ** 28,
      sample_count: 2 ** 24,
      response_token_count: 2 ** 27,
    };
    const before = process.memoryUsage().arrayBuffers;
    const assembler = new TrainBatchAssembler();
    assembler.push({ payload: { $case: 'header', value: claim } });
    for (const block of blocks) assembler.push(block);
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(16 * 1024 ** 2);
    expect(catchError(() => assembler.finish()).message).toMatch(/ended after 3 samples/);
    // An honest header over the same blocks assembles the batch exactly.
    const honest = new TrainBatchAssembler();
    honest.push(head);
    for (const block of blocks) honest.push(block);
    expectSameBatch(honest.finish().batch, packed);
  });

  it('checks response tokens against the header, and works without the announcement', () => {
    const packed = packTrainBatch(randomBatch(6, 20, 6));
    const chunks = () => trainBatchToChunks(packed, header, { maxChunkBytes: 200 });
    const announced = (list: TrainChunk[]) => {
      const first = list[0]?.payload;
      if (first?.$case !== 'header') throw new Error('expected the header');
      return first.value;
    };
    const fewer = chunks();
    announced(fewer).response_token_count = packed.loss_masks.length - 1;
    expect(catchError(() => trainBatchFromChunks(fewer)).message).toMatch(
      /response tokens received, more than the header's \d+$/,
    );
    const more = chunks();
    announced(more).response_token_count = packed.loss_masks.length + 1;
    expect(catchError(() => trainBatchFromChunks(more)).message).toMatch(/response tokens of \d+\)$/);
    const impossible = chunks();
    announced(impossible).response_token_count = packed.tokens.length + 1;
    expect(catchError(() => trainBatchFromChunks(impossible)).message).toMatch(/more than its \d+ tokens$/);
    const tooManyTokens = chunks();
    announced(tooManyTokens).token_count = packed.tokens.length - 1;
    expect(catchError(() => trainBatchFromChunks(tooManyTokens)).message).toMatch(
      /\d+ tokens received, more than the header's \d+$/,
    );
    // A sender that does not announce response tokens (an older client) still gets its batch.
    const legacy = chunks();
    delete announced(legacy).response_token_count;
    expectSameBatch(trainBatchFromChunks(legacy).batch, packed);
  });

  it('rejects logprobs present in some blocks only, and oversized or inconsistent blocks', () => {
    const packed = packTrainBatch(randomBatch(6, 20, 6));
    const chunks = () => trainBatchToChunks(packed, header, { maxChunkBytes: 200 });
    const withTokens = (list: TrainChunk[]) =>
      list.findIndex(
        (chunk) => chunk.payload?.$case === 'samples' && chunk.payload.value.loss_masks.length > 0,
      );
    const partial = chunks();
    const block = partial[withTokens(partial)]?.payload;
    if (block?.$case !== 'samples') throw new Error('expected a sample block');
    block.value.rollout_log_probs = Buffer.alloc(0);
    expect(catchError(() => trainBatchFromChunks(partial)).message).toBe(
      'train stream: rollout_log_probs present in some blocks only',
    );

    const extra = chunks();
    const first = extra[0]?.payload;
    if (first?.$case !== 'header') throw new Error('expected the header');
    first.value.sample_count = 1;
    expect(catchError(() => trainBatchFromChunks(extra)).message).toMatch(/more than the header's 1$/);

    const lengths = chunks();
    const sample = lengths[1]?.payload;
    if (sample?.$case !== 'samples') throw new Error('expected a sample block');
    sample.value.response_lengths = Buffer.from(
      new Int32Array([10_000, ...new Int32Array(sample.value.sample_count - 1)]).buffer,
    );
    expect(catchError(() => trainBatchFromChunks(lengths)).message).toMatch(
      /^samples block 0: sample 0 has total_length \d+ and response_length 10000$/,
    );

    const rewards = chunks();
    const short = rewards[1]?.payload;
    if (short?.$case !== 'samples') throw new Error('expected a sample block');
    short.value.rewards = short.value.rewards.subarray(4);
    const error = catchError(() => trainBatchFromChunks(rewards));
    expect(error.code).toBe('invalid_argument');
    expect(error.message).toMatch(/^samples block 0: rewards: expected \d+ float32 elements, got \d+$/);
  });
});

describe('TrainerService over real gRPC', () => {
  const server = new Server({ 'grpc.max_receive_message_length': 64 * 1024 * 1024 });
  let client: TrainerServiceClient;
  let received: PackedTrainBatch | null = null;

  beforeAll(async () => {
    server.addService(TrainerServiceService, {
      getInfo: (_call: unknown, callback: sendUnaryData<unknown>) => callback(null, {}),
      train: (
        call: ServerReadableStream<TrainChunk, TrainResponse>,
        callback: sendUnaryData<TrainResponse>,
      ) => {
        const assembler = new TrainBatchAssembler();
        let failed = false;
        call.on('data', (chunk: TrainChunk) => {
          if (failed) return;
          try {
            assembler.push(chunk);
          } catch (error) {
            failed = true;
            callback({ code: status.INVALID_ARGUMENT, details: (error as Error).message });
          }
        });
        call.on('end', () => {
          if (failed) return;
          try {
            const { header: batchHeader, batch } = assembler.finish();
            received = batch;
            callback(null, {
              batch_id: batchHeader.batch_id,
              rollout_id: batchHeader.rollout_id,
              samples_trained: batch.sample_count,
              tokens_trained: batch.tokens.length,
              optimizer_steps: 1,
              metrics: { loss: 0.25 },
              duration_seconds: 0,
            });
          } catch (error) {
            callback({ code: status.INVALID_ARGUMENT, details: (error as Error).message });
          }
        });
      },
      updateWeights: () => undefined,
      saveCheckpoint: () => undefined,
      loadCheckpoint: () => undefined,
      health: () => undefined,
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) =>
        error ? reject(error) : resolve(bound),
      ),
    );
    client = new TrainerServiceClient(`127.0.0.1:${port}`, credentials.createInsecure());
  });

  afterAll(() => {
    client?.close();
    server.forceShutdown();
  });

  function train(chunks: TrainChunk[]): Promise<TrainResponse> {
    return new Promise((resolve, reject) => {
      const stream = client.train((error, response) => (error ? reject(error) : resolve(response!)));
      for (const chunk of chunks) stream.write(chunk);
      stream.end();
    });
  }

  it('streams a batch larger than the default 4 MiB message limit', async () => {
    const packed = packTrainBatch(randomBatch(300, 8000, 11));
    expect(packed.tokens.byteLength).toBeGreaterThan(4 * 1024 * 1024);
    const response = await train(trainBatchToChunks(packed, header, { maxChunkBytes: 1024 * 1024 }));
    expect(response).toMatchObject({ batch_id: 'batch-1', rollout_id: 7, samples_trained: 300 });
    expect(response.metrics.loss).toBe(0.25);
    expect(received).not.toBeNull();
    expectSameBatch(received!, packed);
  });

  it('answers a malformed stream with INVALID_ARGUMENT and the reason', async () => {
    const chunks = trainBatchToChunks(packTrainBatch(randomBatch(5, 10, 2)), header);
    await expect(train(chunks.slice(1))).rejects.toMatchObject({
      code: status.INVALID_ARGUMENT,
      details: expect.stringContaining('before the header'),
    });
  });
});

function expectSameBatch(actual: PackedTrainBatch, expected: PackedTrainBatch): void {
  expect(actual.sample_count).toBe(expected.sample_count);
  for (const key of [
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
  ] as const) {
    const left = actual[key];
    const right = expected[key];
    expect(left?.constructor, key).toBe(right?.constructor);
    expect(
      Buffer.compare(
        Buffer.from(left!.buffer, left!.byteOffset, left!.byteLength),
        Buffer.from(right!.buffer, right!.byteOffset, right!.byteLength),
      ),
      key,
    ).toBe(0);
  }
}
