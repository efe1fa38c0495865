import type { TrainChunk } from '@dressage/protocol';
import { TrainBatchAssembler, trainBatchToChunks } from '@dressage/protocol/internal';
import { describe, expect, it } from 'vitest';
import { createSyntheticTrainBatch } from './synthetic-batch.js';
import { decodeTrainChunk, encodeTrainChunk } from './train-chunk-codec.js';

// The server reassembles the Train stream with @dressage/protocol's TrainBatchAssembler, fed by this
// package's codec (columns decoded as views at arbitrary offsets into the received message).

const header = { batch_id: 'r', rollout_id: 1, global_batch_size: 4, expected_weight_version: '' };

function receive(chunks: TrainChunk[]) {
  const assembler = new TrainBatchAssembler();
  for (const chunk of chunks) assembler.push(chunk);
  return assembler.finish();
}

describe('Train stream through the TrainChunk codec', () => {
  it('reassembles the sent batch exactly, from views at odd offsets', () => {
    for (const withLogProbs of [true, false]) {
      const batch = createSyntheticTrainBatch({
        samples: 37,
        tokensPerSample: 101,
        responseTokens: 33,
        withLogProbs,
      });
      const chunks = trainBatchToChunks(batch, header, { maxChunkBytes: 3000 });
      const wire = chunks.map((chunk) => decodeTrainChunk(encodeTrainChunk(chunk)));
      const received = receive(wire);
      expect(received.header).toEqual(chunks[0]?.payload?.value);
      expect(received.batch).toEqual(batch);
    }
  });

  it('rejects malformed streams with the protocol errors', () => {
    const batch = createSyntheticTrainBatch({ samples: 6, tokensPerSample: 20, responseTokens: 6 });
    const chunks = () => trainBatchToChunks(batch, header, { maxChunkBytes: 200 });
    expect(() => receive(chunks().slice(1))).toThrow('sample block before the header');
    expect(() => receive(chunks().slice(0, -1))).toThrow(/header announced 6/);
    const [first, ...rest] = chunks();
    expect(() => receive([first as TrainChunk, first as TrainChunk, ...rest])).toThrow('a second header');
    const partial = chunks();
    const block = partial[2]?.payload;
    if (block?.$case === 'samples') block.value.rollout_log_probs = Buffer.alloc(0);
    expect(() => receive(partial)).toThrow('rollout_log_probs present in some blocks only');
    const badMask = chunks();
    const masked = badMask[1]?.payload;
    if (masked?.$case === 'samples') {
      masked.value.loss_masks = Buffer.from(masked.value.loss_masks);
      masked.value.loss_masks[0] = 2;
    }
    expect(() => receive(badMask)).toThrow(/not 0 or 1/);
    const truncated = chunks();
    const cut = truncated[1]?.payload;
    if (cut?.$case === 'samples')
      cut.value.tokens = cut.value.tokens.subarray(0, cut.value.tokens.length - 1);
    expect(() => receive(truncated)).toThrow(expect.objectContaining({ code: 'data_loss' }));
  });
});
