import { SampleBlock, TrainChunk } from '@dressage/protocol';
import { trainBatchToChunks } from '@dressage/protocol/internal';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createSyntheticTrainBatch } from './synthetic-batch.js';
import { decodeTrainChunk, encodeTrainChunk, serializeTrainChunkForFraming } from './train-chunk-codec.js';

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
  routed_experts: column,
  padding: fc.constant(Buffer.alloc(0)),
});

// The generated decoder keeps the last padding field it met; receivers ignore it.
function withoutPadding(chunk: TrainChunk): unknown {
  const json = TrainChunk.toJSON(chunk) as { samples?: { padding?: unknown } };
  if (json.samples) delete json.samples.padding;
  return json;
}

// Every non-empty column of an encoded sample block starts 8-byte aligned in its gRPC frame (behind
// the 5-byte prefix).
function expectAlignedColumns(encoded: Buffer): void {
  const decoded = decodeTrainChunk(encoded);
  if (decoded.payload?.$case !== 'samples') return;
  for (const [name, value] of Object.entries(decoded.payload.value)) {
    if (!(value instanceof Uint8Array) || value.byteLength === 0) continue;
    expect({ name, offset: (value.byteOffset - encoded.byteOffset + 5) % 8 }).toEqual({ name, offset: 0 });
  }
}

describe('the fast TrainChunk codec', () => {
  it('writes chunks the generated codec reads back identically, with aligned columns', () => {
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
        // The header is the generated codec's own bytes.
        if (chunk.payload?.$case === 'header') expect(fast.equals(generated)).toBe(true);
        expect(withoutPadding(TrainChunk.decode(fast))).toEqual(TrainChunk.toJSON(chunk));
        expect(TrainChunk.toJSON(decodeTrainChunk(fast))).toEqual(
          TrainChunk.toJSON(TrainChunk.decode(generated)),
        );
        expectAlignedColumns(fast);
      }
    }
  });

  it('agrees with the generated codec on random blocks, empty columns included', () => {
    fc.assert(
      fc.property(sampleBlock, (block) => {
        const chunk: TrainChunk = { payload: { $case: 'samples', value: block } };
        const fast = encodeTrainChunk(chunk);
        expect(withoutPadding(TrainChunk.decode(fast))).toEqual(TrainChunk.toJSON(chunk));
        expect(TrainChunk.toJSON(decodeTrainChunk(fast))).toEqual(TrainChunk.toJSON(chunk));
        expectAlignedColumns(fast);
      }),
      { numRuns: 300 },
    );
    // A block with nothing set is an empty message field: tag and zero length.
    const empty = TrainChunk.fromPartial({ payload: { $case: 'samples', value: {} } });
    expect([...encodeTrainChunk(empty)]).toEqual([...TrainChunk.encode(empty).finish()]);
    expect([...encodeTrainChunk(empty)]).toEqual([(2 << 3) | 2, 0]);
  });

  it('settles the layout where padding moves a block across a length-prefix boundary', () => {
    // Block sizes around 2^7 and 2^14, where the block's length prefix grows by a byte.
    for (const base of [100, 16_300]) {
      for (let length = base; length < base + 140; length++) {
        const block = SampleBlock.fromPartial({
          sample_count: 3,
          tokens: Buffer.alloc(length, 7),
          rollout_mask_sums: Buffer.alloc(24, 1),
        });
        const chunk: TrainChunk = { payload: { $case: 'samples', value: block } };
        const fast = encodeTrainChunk(chunk);
        expect(withoutPadding(TrainChunk.decode(fast))).toEqual(TrainChunk.toJSON(chunk));
        expectAlignedColumns(fast);
      }
    }
  });

  it('writes a sample block straight into a gRPC frame, with the bytes of the encoder', () => {
    const batch = createSyntheticTrainBatch({ samples: 12, tokensPerSample: 90, responseTokens: 30 });
    for (const chunk of trainBatchToChunks(batch, header, { maxChunkBytes: 2_000 })) {
      const message = serializeTrainChunkForFraming(chunk);
      const encoded = encodeTrainChunk(chunk);
      expect(message.length).toBe(encoded.length);
      // What grpc-js does with an outgoing message: a 5-byte prefix, then `copy` into the frame.
      const frame = Buffer.alloc(message.length + 5, 0xee);
      frame.writeUInt32BE(message.length, 1);
      message.copy(frame, 5);
      expect(frame.subarray(5).equals(encoded)).toBe(true);
      expectAlignedColumns(frame.subarray(5));
      if (chunk.payload?.$case === 'samples') {
        expect(() => message.copy(Buffer.alloc(message.length), 5)).toThrow(RangeError);
      }
    }
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
