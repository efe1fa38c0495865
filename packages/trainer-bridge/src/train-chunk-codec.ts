import {
  DressageError,
  type SampleBlock,
  TrainBatchHeader,
  TrainChunk,
  TrainerServiceService,
} from '@dressage/protocol';

// SampleBlock's bytes fields in field-number order (field 1 is sample_count).
const blockFields = [
  [2, 'tokens'],
  [3, 'total_lengths'],
  [4, 'response_lengths'],
  [5, 'loss_masks'],
  [6, 'rollout_log_probs'],
  [7, 'rollout_ids'],
  [8, 'rewards'],
  [9, 'raw_rewards'],
  [10, 'rollout_mask_sums'],
  [11, 'truncated'],
  [12, 'sample_indices'],
  [13, 'teacher_log_probs'],
] as const;

type BytesField = (typeof blockFields)[number][1];

function varintSize(value: number): number {
  let size = 1;
  while (value >= 0x80) {
    value = Math.floor(value / 128);
    size += 1;
  }
  return size;
}

function writeVarint(buffer: Buffer, offset: number, value: number): number {
  while (value >= 0x80) {
    buffer[offset++] = (value % 128) | 0x80;
    value = Math.floor(value / 128);
  }
  buffer[offset++] = value;
  return offset;
}

/**
 * Encodes a TrainChunk exactly as the generated codec does (same bytes), but with one copy of each
 * column into a single output buffer instead of the generic writer's two: sample blocks are nearly
 * all payload, and copies are what a large transfer costs.
 */
export function encodeTrainChunk(chunk: TrainChunk): Buffer {
  const payload = chunk.payload;
  if (payload?.$case !== 'samples') return Buffer.from(TrainChunk.encode(chunk).finish());
  const block = payload.value;
  let blockSize = block.sample_count !== 0 ? 1 + varintSize(block.sample_count) : 0;
  for (const [number, name] of blockFields) {
    const length = block[name].length;
    if (length !== 0) blockSize += varintSize(number << 3) + varintSize(length) + length;
  }
  const out = Buffer.allocUnsafe(1 + varintSize(blockSize) + blockSize);
  let offset = writeVarint(out, 0, (2 << 3) | 2);
  offset = writeVarint(out, offset, blockSize);
  if (block.sample_count !== 0) {
    out[offset++] = 1 << 3;
    offset = writeVarint(out, offset, block.sample_count);
  }
  for (const [number, name] of blockFields) {
    const bytes = block[name];
    if (bytes.length === 0) continue;
    offset = writeVarint(out, offset, (number << 3) | 2);
    offset = writeVarint(out, offset, bytes.length);
    out.set(bytes, offset);
    offset += bytes.length;
  }
  return out;
}

function malformed(message: string): DressageError {
  return new DressageError({
    code: 'invalid_argument',
    message: `train stream: malformed chunk (${message})`,
  });
}

class Reader {
  offset: number;
  constructor(
    readonly buffer: Buffer,
    start: number,
    readonly end: number,
  ) {
    this.offset = start;
  }

  varint(): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.offset >= this.end) throw malformed('truncated varint');
      const byte = this.buffer[this.offset++] as number;
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) return value;
      scale *= 128;
    }
    throw malformed('varint too long');
  }

  bytes(): Buffer {
    const length = this.varint();
    const start = this.offset;
    if (start + length > this.end) throw malformed('length past the end of the message');
    this.offset += length;
    // A plain Uint8Array view, not a Buffer: Buffer#slice shares memory where Uint8Array#slice copies,
    // and consumers copy unaligned columns with slice().
    return new Uint8Array(this.buffer.buffer, this.buffer.byteOffset + start, length) as Buffer;
  }

  skip(wireType: number): void {
    if (wireType === 0) this.varint();
    else if (wireType === 1) this.offset += 8;
    else if (wireType === 2) this.bytes();
    else if (wireType === 5) this.offset += 4;
    else throw malformed(`unsupported wire type ${wireType}`);
    if (this.offset > this.end) throw malformed('field past the end of the message');
  }
}

function emptyBlock(): SampleBlock {
  const empty = Buffer.alloc(0);
  return {
    sample_count: 0,
    tokens: empty,
    total_lengths: empty,
    response_lengths: empty,
    loss_masks: empty,
    rollout_log_probs: empty,
    rollout_ids: empty,
    rewards: empty,
    raw_rewards: empty,
    rollout_mask_sums: empty,
    truncated: empty,
    sample_indices: empty,
    teacher_log_probs: empty,
  };
}

const fieldNames = new Map<number, BytesField>(blockFields.map(([number, name]) => [number, name]));

/**
 * Decodes a TrainChunk like the generated codec, except that a sample block's columns are views into
 * the received message rather than copies (the assembler copies them once, into the batch).
 */
export function decodeTrainChunk(buffer: Buffer): TrainChunk {
  const reader = new Reader(buffer, 0, buffer.length);
  let chunk: TrainChunk = { payload: undefined };
  while (reader.offset < reader.end) {
    const tag = reader.varint();
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    if (field === 1 && wireType === 2) {
      chunk = { payload: { $case: 'header', value: TrainBatchHeader.decode(reader.bytes()) } };
    } else if (field === 2 && wireType === 2) {
      const body = reader.bytes();
      chunk = { payload: { $case: 'samples', value: decodeBlock(body) } };
    } else reader.skip(wireType);
  }
  return chunk;
}

function decodeBlock(body: Buffer): SampleBlock {
  const block = emptyBlock();
  const reader = new Reader(body, 0, body.length);
  while (reader.offset < reader.end) {
    const tag = reader.varint();
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    const name = fieldNames.get(field);
    if (field === 1 && wireType === 0) block.sample_count = reader.varint() >>> 0;
    else if (name !== undefined && wireType === 2) block[name] = reader.bytes();
    else reader.skip(wireType);
  }
  return block;
}

/**
 * TrainerService's grpc-js definition with the fast TrainChunk codec on the Train stream (same
 * wire format as the generated `TrainerServiceService`). Both the client and server helpers use it.
 */
export const trainerServiceDefinition = {
  ...TrainerServiceService,
  train: {
    ...TrainerServiceService.train,
    requestSerialize: encodeTrainChunk,
    requestDeserialize: decodeTrainChunk,
  },
} as const;
