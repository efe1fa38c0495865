// Benchmark: moving a training batch to the trainer. The packed path (typed arrays in `bytes`
// fields, chunked for the Train stream) is measured against two baselines in the same run: the
// slime train_data dict as JSON, and the same token data as protobuf `repeated int32`.
// Last output line: one JSON object of headline figures.
import { BinaryReader, BinaryWriter } from '@bufbuild/protobuf/wire';
import { packTrainBatch, type TrainBatch, TrainChunk } from '../src/index.js';
import { trainBatchFromChunks, trainBatchToChunks } from '../src/internal.js';

const SAMPLES = 256;
const TOKENS_PER_SAMPLE = 4096;
const RESPONSE_PER_SAMPLE = 3072;
const ROUNDS = 7;

function buildBatch(): TrainBatch {
  let state = 12345;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
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
  for (let i = 0; i < SAMPLES; i++) {
    batch.tokens.push(Array.from({ length: TOKENS_PER_SAMPLE }, () => Math.floor(next() * 151_936)));
    batch.response_lengths.push(RESPONSE_PER_SAMPLE);
    const mask = Array.from({ length: RESPONSE_PER_SAMPLE }, () => (next() < 0.8 ? 1 : 0)) as (0 | 1)[];
    batch.loss_masks.push(mask);
    batch.rollout_log_probs?.push(mask.map((value) => (value ? Math.fround(-next() * 3) : 0)));
    batch.rewards.push(next() * 2 - 1);
    batch.raw_reward.push(next());
    batch.truncated.push(0);
    batch.sample_indices.push(i);
    batch.rollout_ids.push(i >> 1);
    batch.rollout_mask_sums.push(RESPONSE_PER_SAMPLE * 0.8);
  }
  return batch;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

function time(run: () => unknown): number {
  const durations: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const start = performance.now();
    run();
    durations.push(performance.now() - start);
  }
  return median(durations);
}

// The `repeated` alternative: every token id, mask entry and logprob written as a varint/fixed32.
function encodeRepeated(batch: TrainBatch): Uint8Array {
  const writer = new BinaryWriter();
  for (let i = 0; i < batch.tokens.length; i++) {
    writer.uint32(10).fork();
    writer.uint32(10).fork();
    for (const id of batch.tokens[i] as number[]) writer.int32(id);
    writer.join();
    writer.uint32(18).fork();
    for (const value of batch.loss_masks[i] as number[]) writer.int32(value);
    writer.join();
    writer.uint32(26).fork();
    for (const value of batch.rollout_log_probs![i] as number[]) writer.float(value);
    writer.join();
    writer.join();
  }
  return writer.finish();
}

function decodeRepeated(bytes: Uint8Array): number {
  const reader = new BinaryReader(bytes);
  let count = 0;
  while (reader.pos < reader.len) {
    reader.uint32();
    const end = reader.uint32() + reader.pos;
    while (reader.pos < end) {
      const tag = reader.uint32();
      const fieldEnd = reader.uint32() + reader.pos;
      const isFloat = tag >>> 3 === 3;
      while (reader.pos < fieldEnd) {
        if (isFloat) reader.float();
        else reader.int32();
        count++;
      }
    }
  }
  return count;
}

const batch = buildBatch();
const tokenCount = SAMPLES * TOKENS_PER_SAMPLE;
const header = {
  batch_id: 'bench',
  rollout_id: 0,
  global_batch_size: SAMPLES / 2,
  expected_weight_version: '1',
};

let packedBytes = 0;
const packedEncodeMs = time(() => {
  const chunks = trainBatchToChunks(packTrainBatch(batch), header);
  packedBytes = 0;
  for (const chunk of chunks) packedBytes += TrainChunk.encode(chunk).finish().length;
});
const encodedChunks = trainBatchToChunks(packTrainBatch(batch), header).map((chunk) =>
  TrainChunk.encode(chunk).finish(),
);
const packedDecodeMs = time(() =>
  trainBatchFromChunks(encodedChunks.map((bytes) => TrainChunk.decode(bytes))),
);

let jsonBytes = 0;
const jsonEncodeMs = time(() => {
  jsonBytes = Buffer.byteLength(JSON.stringify(batch));
});
const jsonText = JSON.stringify(batch);
const jsonDecodeMs = time(() => JSON.parse(jsonText));

let repeatedBytes = 0;
const repeatedEncodeMs = time(() => {
  repeatedBytes = encodeRepeated(batch).length;
});
const repeatedEncoded = encodeRepeated(batch);
const repeatedDecodeMs = time(() => decodeRepeated(repeatedEncoded));

const megabytes = packedBytes / 1024 / 1024;
const rows = [
  ['packed bytes (Train chunks)', packedEncodeMs, packedDecodeMs, packedBytes],
  ['JSON train_data', jsonEncodeMs, jsonDecodeMs, jsonBytes],
  ['protobuf repeated scalars', repeatedEncodeMs, repeatedDecodeMs, repeatedBytes],
] as const;
console.log(
  `batch: ${SAMPLES} samples x ${TOKENS_PER_SAMPLE} tokens (${(tokenCount / 1e6).toFixed(2)}M tokens)`,
);
console.log('format                          encode ms   decode ms   size MiB');
for (const [name, encode, decode, size] of rows) {
  console.log(
    `${name.padEnd(30)} ${encode.toFixed(1).padStart(9)} ${decode.toFixed(1).padStart(11)} ${(size / 1024 / 1024).toFixed(1).padStart(10)}`,
  );
}
const figures = {
  train_batch_encode_speedup_vs_json: Number((jsonEncodeMs / packedEncodeMs).toFixed(1)),
  train_batch_decode_speedup_vs_json: Number((jsonDecodeMs / packedDecodeMs).toFixed(1)),
  train_batch_encode_speedup_vs_repeated: Number((repeatedEncodeMs / packedEncodeMs).toFixed(1)),
  train_batch_decode_speedup_vs_repeated: Number((repeatedDecodeMs / packedDecodeMs).toFixed(1)),
  train_batch_size_ratio_vs_json: Number((jsonBytes / packedBytes).toFixed(2)),
  packed_encode_mib_per_s: Math.round(megabytes / (packedEncodeMs / 1000)),
};
console.log(
  `packed encode is ${figures.train_batch_encode_speedup_vs_json}x JSON and ${figures.train_batch_encode_speedup_vs_repeated}x repeated scalars; decode ${figures.train_batch_decode_speedup_vs_json}x JSON`,
);
console.log(JSON.stringify(figures));
