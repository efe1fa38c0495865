import {
  DressageError,
  type PackedTrainBatch,
  type PackedType,
  type SampleBlock,
  type TrainBatchHeader,
  type TrainChunk,
  unpackTypedArray,
} from '@dressage/protocol';

function invalid(message: string, details: Record<string, unknown> = {}): DressageError {
  return new DressageError({ code: 'invalid_argument', message, details });
}

const sizes = { int32: 4, uint8: 1, float32: 4, float64: 8 } as const;

// Checks a per-token column's byte length and keeps the received bytes as they are (no copy yet).
function column(bytes: Uint8Array, type: keyof typeof sizes, expected: number, field: string): Uint8Array {
  const size = sizes[type];
  if (bytes.byteLength % size !== 0) {
    throw new DressageError({
      code: 'data_loss',
      message: `${field}: ${bytes.byteLength} bytes is not a whole number of ${type} elements (${size} bytes each); the data is truncated or of another type`,
      details: { field, type, byte_length: bytes.byteLength },
    });
  }
  if (bytes.byteLength / size !== expected) {
    throw invalid(`${field}: expected ${expected} ${type} elements, got ${bytes.byteLength / size}`, {
      field,
      type,
      expected_length: expected,
      length: bytes.byteLength / size,
    });
  }
  return bytes;
}

type ColumnName = Exclude<keyof PackedTrainBatch, 'sample_count'>;

const columnTypes: Record<ColumnName, PackedType> = {
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
};

const perSampleColumns = [
  'rollout_ids',
  'rewards',
  'raw_rewards',
  'rollout_mask_sums',
  'truncated',
  'sample_indices',
] as const;

type ReceivedBlock = Record<ColumnName, Uint8Array | null> & { responseTokens: number };

/**
 * Reassembles a `Train` stream like `@dressage/protocol`'s TrainBatchAssembler (same checks, same
 * errors), but keeps each block's columns as the received bytes and copies them exactly once, into
 * batch arrays allocated at the end: large batches are bound by copies and garbage collection.
 */
export class TrainBatchReceiver {
  private header: TrainBatchHeader | null = null;
  private readonly blocks: ReceivedBlock[] = [];
  private samples = 0;
  private tokens = 0;

  /** The header, once it has arrived. */
  get receivedHeader(): TrainBatchHeader | null {
    return this.header;
  }

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
    const block = receiveBlock(payload.value, this.blocks.length);
    this.samples += payload.value.sample_count;
    this.tokens += (block.tokens as Uint8Array).byteLength / 4;
    if (this.samples > this.header.sample_count) {
      throw invalid(
        `train stream: ${this.samples} samples received, more than the header's ${this.header.sample_count}`,
      );
    }
    this.blocks.push(block);
  }

  /** Checks the totals against the header and copies the blocks into one packed batch. */
  finish(): { header: TrainBatchHeader; batch: PackedTrainBatch } {
    const header = this.header;
    if (header === null) throw invalid('train stream: ended without a header');
    if (this.samples !== header.sample_count || this.tokens !== header.token_count) {
      throw invalid(
        `train stream: ended after ${this.samples} samples / ${this.tokens} tokens, header announced ${header.sample_count} / ${header.token_count}`,
        { received_samples: this.samples, received_tokens: this.tokens },
      );
    }
    const blocks = this.blocks;
    const withTokens = blocks.filter((block) => block.responseTokens > 0);
    const optional = (name: 'rollout_log_probs' | 'teacher_log_probs'): boolean => {
      const present = withTokens.filter((block) => block[name] !== null).length;
      if (present !== 0 && present !== withTokens.length) {
        throw invalid(`train stream: ${name} present in some blocks only`);
      }
      return present > 0;
    };
    const hasLogProbs = optional('rollout_log_probs');
    const hasTeacher = optional('teacher_log_probs');
    const join = <K extends ColumnName>(name: K): PackedTrainBatch[K] => {
      let total = 0;
      for (const block of blocks) total += block[name]?.byteLength ?? 0;
      const type = columnTypes[name];
      const buffer = new ArrayBuffer(total);
      const bytes = new Uint8Array(buffer);
      let offset = 0;
      for (const block of blocks) {
        const part = block[name];
        if (part === null) continue;
        bytes.set(part, offset);
        offset += part.byteLength;
      }
      return unpackTypedArray(bytes, type) as unknown as PackedTrainBatch[K];
    };
    const batch: PackedTrainBatch = {
      sample_count: this.samples,
      tokens: join('tokens'),
      total_lengths: join('total_lengths'),
      response_lengths: join('response_lengths'),
      loss_masks: join('loss_masks'),
      rollout_log_probs: hasLogProbs ? join('rollout_log_probs') : null,
      teacher_log_probs: hasTeacher ? join('teacher_log_probs') : null,
      rollout_ids: join('rollout_ids'),
      rewards: join('rewards'),
      raw_rewards: join('raw_rewards'),
      rollout_mask_sums: join('rollout_mask_sums'),
      truncated: join('truncated'),
      sample_indices: join('sample_indices'),
    };
    this.blocks.length = 0;
    return { header, batch };
  }
}

function receiveBlock(block: SampleBlock, index: number): ReceivedBlock {
  const count = block.sample_count;
  const field = (name: string) => `samples block ${index}: ${name}`;
  const totalLengths = unpackTypedArray(block.total_lengths, 'int32', {
    expectedLength: count,
    field: field('total_lengths'),
  });
  const responseLengths = unpackTypedArray(block.response_lengths, 'int32', {
    expectedLength: count,
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
  const lossMasks = column(block.loss_masks, 'uint8', responseTotal, field('loss_masks'));
  for (let i = 0; i < lossMasks.length; i++) {
    if ((lossMasks[i] as number) > 1)
      throw invalid(`${field('loss_masks')}[${i}] is ${lossMasks[i]}, not 0 or 1`);
  }
  const optionalFloats = (bytes: Uint8Array, name: string) =>
    bytes.byteLength === 0 && responseTotal > 0 ? null : column(bytes, 'float32', responseTotal, field(name));
  const received: ReceivedBlock = {
    responseTokens: responseTotal,
    tokens: column(block.tokens, 'int32', tokenTotal, field('tokens')),
    total_lengths: block.total_lengths,
    response_lengths: block.response_lengths,
    loss_masks: lossMasks,
    rollout_log_probs: optionalFloats(block.rollout_log_probs, 'rollout_log_probs'),
    teacher_log_probs: optionalFloats(block.teacher_log_probs, 'teacher_log_probs'),
    rollout_ids: null,
    rewards: null,
    raw_rewards: null,
    rollout_mask_sums: null,
    truncated: null,
    sample_indices: null,
  };
  for (const name of perSampleColumns) {
    const type = columnTypes[name] as keyof typeof sizes;
    received[name] = column(block[name], type, count, field(name));
  }
  return received;
}
