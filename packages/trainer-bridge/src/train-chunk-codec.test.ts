import { type SampleBlock, TrainChunk, trainBatchToChunks } from '@dressage/protocol';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createSyntheticTrainBatch } from './synthetic-batch.js';
import { decodeTrainChunk, encodeTrainChunk } from './train-chunk-codec.js';

const header = { batch_id: 'codec', rollout_id: 3, global_batch_size: 2, expected_weight_version: 'v1' };

// Any byte string, often empty (an absent column), sometimes long enough for a 2- or 3-byte length.
const column = fc
  .oneof(
    { arbitrary: fc.constant(new Uint8Array(0)), weight: 2 },
    { arbitrary: fc.uint8Array({ maxLength: 300 }), weight: 3 },
    { arbitrary: fc.uint8Array({ minLength: 16_000, maxLength: 17_000 }), weight: 1 },
  )
  .map((bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));

const sampleBlock: fc.Arbitrary<SampleBlock> = fc.record({
  sample_count: fc.oneof(fc.constant(0), fc.nat(300), fc.integer({ min: 0, max: 2 ** 32 - 1 })),
  tokens: column,
  total_lengths: column,
  response_lengths: column,
  loss_masks: column,
  rollout_log_probs: column,
  rollout_ids: column,
  rewards: column,
  raw_rewards: column,
  rollout_mask_sums: column,
  truncated: column,
  sample_indices: column,
  teacher_log_probs: column,
});

describe('the fast TrainChunk codec', () => {
  it('writes the same bytes as the generated codec and reads them back identically', () => {
    for (const withLogProbs of [true, false]) {
      const batch = createSyntheticTrainBatch({
        samples: 40,
        tokensPerSample: 300,
        responseTokens: 90,
        withLogProbs,
      });
      const chunks = trainBatchToChunks(
        batch,
        { ...header, loss: { eps_clip: 0.1 } },
        { maxChunkBytes: 10_000 },
      );
      expect(chunks.length).toBeGreaterThan(3);
      for (const chunk of chunks) {
        const generated = Buffer.from(TrainChunk.encode(chunk).finish());
        const fast = encodeTrainChunk(chunk);
        expect(fast.equals(generated)).toBe(true);
        expect(TrainChunk.toJSON(decodeTrainChunk(fast))).toEqual(
          TrainChunk.toJSON(TrainChunk.decode(generated)),
        );
      }
    }
  });

  it('matches the generated encoder byte for byte on random blocks, empty columns included', () => {
    fc.assert(
      fc.property(sampleBlock, (block) => {
        const chunk: TrainChunk = { payload: { $case: 'samples', value: block } };
        const generated = Buffer.from(TrainChunk.encode(chunk).finish());
        const fast = encodeTrainChunk(chunk);
        expect(fast.equals(generated)).toBe(true);
        expect(TrainChunk.toJSON(decodeTrainChunk(fast))).toEqual(TrainChunk.toJSON(chunk));
      }),
      { numRuns: 300 },
    );
    // A block with nothing set is an empty message field: tag and zero length.
    const empty = TrainChunk.fromPartial({ payload: { $case: 'samples', value: {} } });
    expect([...encodeTrainChunk(empty)]).toEqual([...TrainChunk.encode(empty).finish()]);
    expect([...encodeTrainChunk(empty)]).toEqual([(2 << 3) | 2, 0]);
  });

  it('decodes columns at odd offsets into correct, independent arrays', () => {
    const batch = createSyntheticTrainBatch({ samples: 3, tokensPerSample: 7, responseTokens: 3 });
    const chunk = trainBatchToChunks(batch, header)[1] as TrainChunk;
    const decoded = decodeTrainChunk(encodeTrainChunk(chunk));
    const block = decoded.payload?.$case === 'samples' ? decoded.payload.value : null;
    const copy = block?.total_lengths.slice() as Uint8Array;
    expect(copy.byteOffset).toBe(0);
    expect(Array.from(new Int32Array(copy.buffer, 0, 3))).toEqual(Array.from(batch.total_lengths));
  });

  it('skips unknown fields and rejects truncated messages', () => {
    const chunk = trainBatchToChunks(
      createSyntheticTrainBatch({ samples: 2, tokensPerSample: 8, responseTokens: 2 }),
      header,
    )[1] as TrainChunk;
    const encoded = encodeTrainChunk(chunk);
    const withUnknown = Buffer.concat([Buffer.from([(9 << 3) | 0, 5]), encoded]);
    expect(TrainChunk.toJSON(decodeTrainChunk(withUnknown))).toEqual(TrainChunk.toJSON(chunk));
    expect(() => decodeTrainChunk(encoded.subarray(0, encoded.length - 3))).toThrow(/malformed chunk/);
  });
});
