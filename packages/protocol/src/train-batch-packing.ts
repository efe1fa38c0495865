import { DressageError } from './errors.js';
import type { SampleBlock, TrainBatchHeader, TrainChunk } from './gen/dressage/trainer/v1/trainer.js';
import {
  checkPackedLength,
  type PackedArrayByType,
  type PackedType,
  packTypedArray,
  unpackTypedArray,
} from './packing.js';
import type { TrainBatch } from './schemas/train-batch.js';

/**
 * A TrainBatch in typed arrays: per-sample arrays have `sample_count` entries, per-token arrays
 * concatenate the samples in order (`tokens` over all tokens, the others over response tokens).
 */
export interface PackedTrainBatch {
  sample_count: number;
  tokens: Int32Array;
  total_lengths: Int32Array;
  response_lengths: Int32Array;
  loss_masks: Uint8Array;
  rollout_log_probs: Float32Array | null;
  teacher_log_probs: Float32Array | null;
  rollout_ids: Int32Array;
  rewards: Float32Array;
  raw_rewards: Float32Array;
  rollout_mask_sums: Float64Array;
  truncated: Uint8Array;
  sample_indices: Int32Array;
}

function invalid(message: string, details: Record<string, unknown> = {}): DressageError {
  return new DressageError({ code: 'invalid_argument', message, details });
}

function sampleArray(batch: TrainBatch, key: keyof TrainBatch, count: number): void {
  const values = batch[key] as unknown[] | undefined;
  if (values !== undefined && values.length !== count) {
    throw invalid(`train batch: ${String(key)} has ${values.length} entries but tokens has ${count}`, {
      field: key,
    });
  }
}

/**
 * Packs slime's `train_data` dict into typed arrays, checking every length invariant on the way
 * (response tails fit their samples, masks and logprobs cover exactly the response tokens).
 */
export function packTrainBatch(batch: TrainBatch): PackedTrainBatch {
  const count = batch.tokens.length;
  for (const key of [
    'response_lengths',
    'rewards',
    'raw_reward',
    'truncated',
    'sample_indices',
    'rollout_ids',
    'loss_masks',
    'rollout_mask_sums',
    'rollout_log_probs',
    'teacher_log_probs',
  ] as const) {
    sampleArray(batch, key, count);
  }
  let tokenTotal = 0;
  let responseTotal = 0;
  for (let i = 0; i < count; i++) {
    const length = (batch.tokens[i] as number[]).length;
    const response = batch.response_lengths[i] as number;
    if (!Number.isInteger(response) || response < 0 || response > length) {
      throw invalid(
        `train batch: response_lengths[${i}] = ${response} does not fit sample ${i} of ${length} tokens`,
        {
          field: `response_lengths[${i}]`,
        },
      );
    }
    tokenTotal += length;
    responseTotal += response;
  }
  const packed: PackedTrainBatch = {
    sample_count: count,
    tokens: new Int32Array(tokenTotal),
    total_lengths: new Int32Array(count),
    response_lengths: Int32Array.from(batch.response_lengths),
    loss_masks: new Uint8Array(responseTotal),
    rollout_log_probs: batch.rollout_log_probs ? new Float32Array(responseTotal) : null,
    teacher_log_probs: batch.teacher_log_probs ? new Float32Array(responseTotal) : null,
    rollout_ids: Int32Array.from(batch.rollout_ids),
    rewards: Float32Array.from(batch.rewards),
    raw_rewards: Float32Array.from(batch.raw_reward),
    rollout_mask_sums: Float64Array.from(batch.rollout_mask_sums),
    truncated: Uint8Array.from(batch.truncated),
    sample_indices: Int32Array.from(batch.sample_indices),
  };
  let tokenOffset = 0;
  let responseOffset = 0;
  for (let i = 0; i < count; i++) {
    const tokens = batch.tokens[i] as number[];
    const response = batch.response_lengths[i] as number;
    packed.tokens.set(tokens, tokenOffset);
    packed.total_lengths[i] = tokens.length;
    tokenOffset += tokens.length;
    copyResponseArray(batch.loss_masks[i], packed.loss_masks, responseOffset, response, `loss_masks[${i}]`);
    if (packed.rollout_log_probs) {
      const logprobs = batch.rollout_log_probs?.[i];
      copyResponseArray(
        logprobs,
        packed.rollout_log_probs,
        responseOffset,
        response,
        `rollout_log_probs[${i}]`,
      );
    }
    if (packed.teacher_log_probs) {
      const logprobs = batch.teacher_log_probs?.[i];
      copyResponseArray(
        logprobs,
        packed.teacher_log_probs,
        responseOffset,
        response,
        `teacher_log_probs[${i}]`,
      );
    }
    responseOffset += response;
  }
  return packed;
}

function copyResponseArray(
  source: readonly number[] | undefined,
  target: Uint8Array | Float32Array,
  offset: number,
  length: number,
  field: string,
): void {
  if (source === undefined || source.length !== length) {
    throw invalid(
      `train batch: ${field} has ${source?.length ?? 0} entries but the response has ${length} tokens`,
      {
        field,
      },
    );
  }
  target.set(source, offset);
}

/** Converts a packed batch back to slime's `train_data` dict (plain arrays). */
export function unpackTrainBatch(packed: PackedTrainBatch): TrainBatch {
  const tokens: number[][] = [];
  const lossMasks: number[][] = [];
  const logprobs: number[][] | undefined = packed.rollout_log_probs ? [] : undefined;
  const teacher: number[][] | undefined = packed.teacher_log_probs ? [] : undefined;
  let tokenOffset = 0;
  let responseOffset = 0;
  for (let i = 0; i < packed.sample_count; i++) {
    const length = packed.total_lengths[i] as number;
    const response = packed.response_lengths[i] as number;
    tokens.push(Array.from(packed.tokens.subarray(tokenOffset, tokenOffset + length)));
    lossMasks.push(Array.from(packed.loss_masks.subarray(responseOffset, responseOffset + response)));
    logprobs?.push(Array.from(packed.rollout_log_probs!.subarray(responseOffset, responseOffset + response)));
    teacher?.push(Array.from(packed.teacher_log_probs!.subarray(responseOffset, responseOffset + response)));
    tokenOffset += length;
    responseOffset += response;
  }
  return {
    tokens,
    response_lengths: Array.from(packed.response_lengths),
    rewards: Array.from(packed.rewards),
    raw_reward: Array.from(packed.raw_rewards),
    truncated: Array.from(packed.truncated) as (0 | 1)[],
    sample_indices: Array.from(packed.sample_indices),
    rollout_ids: Array.from(packed.rollout_ids),
    loss_masks: lossMasks as (0 | 1)[][],
    rollout_mask_sums: Array.from(packed.rollout_mask_sums),
    total_lengths: Array.from(packed.total_lengths),
    ...(logprobs ? { rollout_log_probs: logprobs } : {}),
    ...(teacher ? { teacher_log_probs: teacher } : {}),
  };
}

/** Options of {@link trainBatchToChunks}. */
export interface ChunkOptions {
  /**
   * Upper bound on one sample block's payload. Samples are never split, so a single larger sample
   * gets a block of its own. Default 4 MiB (gRPC's default receive limit).
   */
  maxChunkBytes?: number;
}

const DEFAULT_MAX_CHUNK_BYTES = 4 * 1024 * 1024;

// Payload bytes one sample adds to a block: per-token data plus the fixed per-sample columns.
function sampleBytes(packed: PackedTrainBatch, index: number): number {
  const length = packed.total_lengths[index] as number;
  const response = packed.response_lengths[index] as number;
  const perResponseToken = 1 + (packed.rollout_log_probs ? 4 : 0) + (packed.teacher_log_probs ? 4 : 0);
  return length * 4 + response * perResponseToken + 38;
}

/**
 * Splits a packed batch into the client-stream messages of `TrainerService.Train`: the header, then
 * sample blocks of at most `maxChunkBytes` each. The blocks are views over the packed arrays (no copy).
 */
export function trainBatchToChunks(
  packed: PackedTrainBatch,
  header: Omit<TrainBatchHeader, 'sample_count' | 'token_count'>,
  options: ChunkOptions = {},
): TrainChunk[] {
  const maxBytes = options.maxChunkBytes ?? DEFAULT_MAX_CHUNK_BYTES;
  const chunks: TrainChunk[] = [
    {
      payload: {
        $case: 'header',
        value: { ...header, sample_count: packed.sample_count, token_count: packed.tokens.length },
      },
    },
  ];
  let start = 0;
  let tokenStart = 0;
  let responseStart = 0;
  while (start < packed.sample_count) {
    let end = start;
    let bytes = 0;
    let tokenEnd = tokenStart;
    let responseEnd = responseStart;
    while (end < packed.sample_count) {
      const size = sampleBytes(packed, end);
      if (end > start && bytes + size > maxBytes) break;
      bytes += size;
      tokenEnd += packed.total_lengths[end] as number;
      responseEnd += packed.response_lengths[end] as number;
      end++;
    }
    chunks.push({
      payload: {
        $case: 'samples',
        value: sampleBlock(packed, start, end, tokenStart, tokenEnd, responseStart, responseEnd),
      },
    });
    start = end;
    tokenStart = tokenEnd;
    responseStart = responseEnd;
  }
  return chunks;
}

function bytesOf(array: Int32Array | Uint8Array | Float32Array | Float64Array): Buffer {
  const view = packTypedArray(array);
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

function sampleBlock(
  packed: PackedTrainBatch,
  start: number,
  end: number,
  tokenStart: number,
  tokenEnd: number,
  responseStart: number,
  responseEnd: number,
): SampleBlock {
  const empty = Buffer.alloc(0);
  return {
    sample_count: end - start,
    tokens: bytesOf(packed.tokens.subarray(tokenStart, tokenEnd)),
    total_lengths: bytesOf(packed.total_lengths.subarray(start, end)),
    response_lengths: bytesOf(packed.response_lengths.subarray(start, end)),
    loss_masks: bytesOf(packed.loss_masks.subarray(responseStart, responseEnd)),
    rollout_log_probs: packed.rollout_log_probs
      ? bytesOf(packed.rollout_log_probs.subarray(responseStart, responseEnd))
      : empty,
    teacher_log_probs: packed.teacher_log_probs
      ? bytesOf(packed.teacher_log_probs.subarray(responseStart, responseEnd))
      : empty,
    rollout_ids: bytesOf(packed.rollout_ids.subarray(start, end)),
    rewards: bytesOf(packed.rewards.subarray(start, end)),
    raw_rewards: bytesOf(packed.raw_rewards.subarray(start, end)),
    rollout_mask_sums: bytesOf(packed.rollout_mask_sums.subarray(start, end)),
    truncated: bytesOf(packed.truncated.subarray(start, end)),
    sample_indices: bytesOf(packed.sample_indices.subarray(start, end)),
  };
}

type ColumnName = Exclude<keyof PackedTrainBatch, 'sample_count'>;

const columnTypes = {
  tokens: 'int32',
  total_lengths: 'int32',
  response_lengths: 'int32',
  loss_masks: 'uint8',
  rollout_log_probs: 'float32',
  teacher_log_probs: 'float32',
  rollout_ids: 'int32',
  rewards: 'float32',
  raw_rewards: 'float32',
  rollout_mask_sums: 'float64',
  truncated: 'uint8',
  sample_indices: 'int32',
} as const satisfies Record<ColumnName, PackedType>;

const perSampleColumns = [
  'rollout_ids',
  'rewards',
  'raw_rewards',
  'rollout_mask_sums',
  'truncated',
  'sample_indices',
] as const;

// One validated block, its columns kept as the received bytes (views; copied once, in `finish`).
// A logprob column is null when the block has response tokens but does not carry it.
type ReceivedBlock = Record<ColumnName, Uint8Array | null> & {
  sampleCount: number;
  tokenCount: number;
  responseTokens: number;
};

/**
 * Reassembles a `Train` stream on the receiving side, validating each block as it arrives, so a
 * server can reject a malformed stream before it has buffered all of it. Blocks are kept as the
 * received bytes and each column is copied exactly once, into batch arrays allocated by `finish`:
 * large batches are bound by copies and garbage collection.
 */
export class TrainBatchAssembler {
  private header: TrainBatchHeader | null = null;
  private readonly blocks: ReceivedBlock[] = [];
  private blockCount = 0;
  private samples = 0;
  private tokens = 0;
  private result: { header: TrainBatchHeader; batch: PackedTrainBatch } | null = null;

  /** Adds the next chunk of the stream. */
  push(chunk: TrainChunk): void {
    const payload = chunk.payload;
    if (payload === undefined) throw invalid('train stream: a chunk carries neither a header nor samples');
    if (payload.$case === 'header') {
      if (this.header !== null) throw invalid('train stream: a second header arrived');
      this.header = payload.value;
      return;
    }
    if (this.header === null) throw invalid('train stream: sample block before the header');
    const block = receiveBlock(payload.value, this.blockCount);
    this.blockCount += 1;
    this.samples += block.sampleCount;
    this.tokens += block.tokenCount;
    if (this.samples > this.header.sample_count) {
      throw invalid(
        `train stream: ${this.samples} samples received, more than the header's ${this.header.sample_count}`,
      );
    }
    this.blocks.push(block);
  }

  /** Checks the totals against the header and copies the blocks into one packed batch. */
  finish(): { header: TrainBatchHeader; batch: PackedTrainBatch } {
    if (this.result !== null) return this.result;
    const header = this.header;
    if (header === null) throw invalid('train stream: ended without a header');
    if (this.samples !== header.sample_count || this.tokens !== header.token_count) {
      throw invalid(
        `train stream: ended after ${this.samples} samples / ${this.tokens} tokens, header announced ${header.sample_count} / ${header.token_count}`,
        { received_samples: this.samples, received_tokens: this.tokens },
      );
    }
    const blocks = this.blocks;
    // Blocks without response tokens carry no per-token data either way.
    const withTokens = blocks.filter((block) => block.responseTokens > 0);
    const optional = (key: 'rollout_log_probs' | 'teacher_log_probs'): Float32Array | null => {
      const present = withTokens.filter((block) => block[key] !== null).length;
      if (present === 0) return null;
      if (present !== withTokens.length) throw invalid(`train stream: ${key} present in some blocks only`);
      return joinColumn(blocks, key);
    };
    const rolloutLogProbs = optional('rollout_log_probs');
    const teacherLogProbs = optional('teacher_log_probs');
    const batch: PackedTrainBatch = {
      sample_count: this.samples,
      tokens: joinColumn(blocks, 'tokens'),
      total_lengths: joinColumn(blocks, 'total_lengths'),
      response_lengths: joinColumn(blocks, 'response_lengths'),
      loss_masks: joinColumn(blocks, 'loss_masks'),
      rollout_log_probs: rolloutLogProbs,
      teacher_log_probs: teacherLogProbs,
      rollout_ids: joinColumn(blocks, 'rollout_ids'),
      rewards: joinColumn(blocks, 'rewards'),
      raw_rewards: joinColumn(blocks, 'raw_rewards'),
      rollout_mask_sums: joinColumn(blocks, 'rollout_mask_sums'),
      truncated: joinColumn(blocks, 'truncated'),
      sample_indices: joinColumn(blocks, 'sample_indices'),
    };
    // Release the received messages; the batch owns its own copy.
    this.blocks.length = 0;
    this.result = { header, batch };
    return this.result;
  }
}

// Copies one column of every block into a fresh (aligned) buffer: the only copy of the data. Always
// a copy, never `slice()`: a decoder's bytes are views into the received message (and a Node Buffer's
// `slice()` is a view too).
function joinColumn<K extends ColumnName>(
  blocks: readonly ReceivedBlock[],
  name: K,
): PackedArrayByType[(typeof columnTypes)[K]] {
  let total = 0;
  for (const block of blocks) total += block[name]?.byteLength ?? 0;
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const block of blocks) {
    const part = block[name];
    if (part === null) continue;
    bytes.set(part, offset);
    offset += part.byteLength;
  }
  return unpackTypedArray(bytes, columnTypes[name]);
}

function receiveBlock(block: SampleBlock, index: number): ReceivedBlock {
  const count = block.sample_count;
  const field = (name: string) => `samples block ${index}: ${name}`;
  const perSample = { expectedLength: count };
  const totalLengths = unpackTypedArray(block.total_lengths, 'int32', {
    ...perSample,
    field: field('total_lengths'),
  });
  const responseLengths = unpackTypedArray(block.response_lengths, 'int32', {
    ...perSample,
    field: field('response_lengths'),
  });
  let tokenTotal = 0;
  let responseTotal = 0;
  for (let i = 0; i < count; i++) {
    const total = totalLengths[i] as number;
    const response = responseLengths[i] as number;
    if (total <= 0 || response < 0 || response > total) {
      throw invalid(`${field('sample')} ${i} has total_length ${total} and response_length ${response}`);
    }
    tokenTotal += total;
    responseTotal += response;
  }
  // Checks a column's length and keeps its bytes as received (no copy yet).
  const column = (bytes: Uint8Array, name: ColumnName, expectedLength: number): Uint8Array => {
    checkPackedLength(bytes, columnTypes[name], { expectedLength, field: field(name) });
    return bytes;
  };
  const optionalFloats = (name: 'rollout_log_probs' | 'teacher_log_probs') =>
    block[name].byteLength === 0 && responseTotal > 0 ? null : column(block[name], name, responseTotal);
  const lossMasks = column(block.loss_masks, 'loss_masks', responseTotal);
  for (let i = 0; i < lossMasks.length; i++) {
    if ((lossMasks[i] as number) > 1)
      throw invalid(`${field('loss_masks')}[${i}] is ${lossMasks[i]}, not 0 or 1`);
  }
  const tokens = column(block.tokens, 'tokens', tokenTotal);
  const received: ReceivedBlock = {
    sampleCount: count,
    tokenCount: tokenTotal,
    responseTokens: responseTotal,
    tokens,
    total_lengths: block.total_lengths,
    response_lengths: block.response_lengths,
    loss_masks: lossMasks,
    rollout_log_probs: optionalFloats('rollout_log_probs'),
    teacher_log_probs: optionalFloats('teacher_log_probs'),
    rollout_ids: null,
    rewards: null,
    raw_rewards: null,
    rollout_mask_sums: null,
    truncated: null,
    sample_indices: null,
  };
  for (const name of perSampleColumns) received[name] = column(block[name], name, count);
  return received;
}

/** Reassembles a complete list of `Train` chunks (see {@link TrainBatchAssembler}). */
export function trainBatchFromChunks(chunks: Iterable<TrainChunk>): {
  header: TrainBatchHeader;
  batch: PackedTrainBatch;
} {
  const assembler = new TrainBatchAssembler();
  for (const chunk of chunks) assembler.push(chunk);
  return assembler.finish();
}
