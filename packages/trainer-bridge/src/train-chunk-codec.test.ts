import { TrainChunk, trainBatchToChunks } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { createSyntheticTrainBatch } from './synthetic-batch.js';
import { decodeTrainChunk, encodeTrainChunk } from './train-chunk-codec.js';

const header = { batch_id: 'codec', rollout_id: 3, global_batch_size: 2, expected_weight_version: 'v1' };

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
