import {
  DressageError,
  SampleBlock,
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
  [14, 'routed_experts'],
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

function writeVarint(buffer: Uint8Array, offset: number, value: number): number {
  while (value >= 0x80) {
    buffer[offset++] = (value % 128) | 0x80;
    value = Math.floor(value / 128);
  }
  buffer[offset++] = value;
  return offset;
}

// SampleBlock.padding: a bytes field receivers ignore, written in front of a column to align it.
const PADDING_TAG = (15 << 3) | 2;
// gRPC puts a 5-byte prefix (compressed flag, length) in front of each message, and receivers
// (grpc-js, grpc-core) hold a received message with that prefix at the start of its buffer: columns
// are aligned as positioned in the frame.
const FRAME_PREFIX_BYTES = 5;
// The widest column element (float64).
const ALIGNMENT = 8;

// Bytes of a padding field that moves what follows forward by `shift` (mod 8): at least its tag and
// a zero length, 2 bytes.
function paddingFor(shift: number): number {
  if (shift === 0) return 0;
  return shift >= 2 ? shift : shift + ALIGNMENT;
}

// Where each column of a sample block goes: the padding in front of each field (0 = none), a trailing
// padding, and the block's size, for a block body that starts at `bodyStart` within the frame.
interface BlockLayout {
  paddings: number[];
  trailing: number;
  size: number;
}

function layoutBlock(block: SampleBlock, bodyStart: number): BlockLayout {
  let position = bodyStart;
  if (block.sample_count !== 0) position += 1 + varintSize(block.sample_count);
  const paddings: number[] = [];
  for (const [number, name] of blockFields) {
    const length = block[name].length;
    if (length === 0) {
      paddings.push(0);
      continue;
    }
    const header = varintSize(number << 3) + varintSize(length);
    const padding = paddingFor((ALIGNMENT - ((position + header) % ALIGNMENT)) % ALIGNMENT);
    paddings.push(padding);
    position += padding + header + length;
  }
  return { paddings, trailing: 0, size: position - bodyStart };
}

/**
 * Encodes a TrainChunk in one copy of each column into a single output buffer (the generic writer
 * makes two: sample blocks are nearly all payload, and copies are what a large transfer costs). A
 * sample block's non-empty columns are preceded by `padding` fields so that each column's data starts
 * 8-byte aligned within the gRPC frame: a receiver holding the frame in an aligned buffer reads every
 * column in place. The generated decoder reads the result as the same chunk (padding aside); other
 * chunks are encoded by the generated codec.
 */
export function encodeTrainChunk(chunk: TrainChunk): Buffer {
  const payload = chunk.payload;
  if (payload?.$case !== 'samples') return Buffer.from(TrainChunk.encode(chunk).finish());
  const writer = sampleChunkWriter(payload.value);
  const out = Buffer.allocUnsafe(writer.size);
  writer.write(out, 0);
  return out;
}

/** A sample-block chunk laid out for writing: its encoded size, and a writer into any buffer. */
export interface TrainChunkWriter {
  readonly size: number;
  /** Writes the encoded chunk at `at`; columns come out aligned when `at` is a frame's offset 5. */
  write(out: Uint8Array, at: number): void;
}

/** The layout and writer of a sample-block chunk (see {@link encodeTrainChunk}). */
export function sampleChunkWriter(block: SampleBlock): TrainChunkWriter {
  // The block's length prefix moves every column, and the columns' padding changes that length:
  // take the first prefix size that agrees with the size it encodes, padding the end of the block
  // up to the prefix's range where a longer prefix leaves the block short of it.
  let layout: BlockLayout | null = null;
  let lengthBytes = 1;
  for (; lengthBytes <= 5; lengthBytes++) {
    const candidate = layoutBlock(block, FRAME_PREFIX_BYTES + 1 + lengthBytes);
    const needed = varintSize(candidate.size);
    if (needed === lengthBytes) {
      layout = candidate;
      break;
    }
    if (needed < lengthBytes) {
      // A few bytes at most: the layouts of neighbouring prefix sizes differ by their padding.
      candidate.trailing = Math.max(2, 2 ** (7 * (lengthBytes - 1)) - candidate.size);
      if (candidate.trailing > 129) throw malformed('sample block layout did not settle');
      candidate.size += candidate.trailing;
      layout = candidate;
      break;
    }
  }
  if (layout === null) throw malformed('sample block too large to encode');
  const settled = layout;
  return {
    size: 1 + lengthBytes + settled.size,
    write(out: Uint8Array, at: number): void {
      let offset = writeVarint(out, at, (2 << 3) | 2);
      offset = writeVarint(out, offset, settled.size);
      if (block.sample_count !== 0) {
        out[offset++] = 1 << 3;
        offset = writeVarint(out, offset, block.sample_count);
      }
      for (let field = 0; field < blockFields.length; field++) {
        const [number, name] = blockFields[field] as (typeof blockFields)[number];
        const bytes = block[name];
        if (bytes.length === 0) continue;
        offset = writePadding(out, offset, settled.paddings[field] as number);
        offset = writeVarint(out, offset, (number << 3) | 2);
        offset = writeVarint(out, offset, bytes.length);
        out.set(bytes, offset);
        offset += bytes.length;
      }
      writePadding(out, offset, settled.trailing);
    },
  };
}

// A padding field of `size` bytes in all (0 = none, else at least 2): its tag, length and zeros.
function writePadding(out: Uint8Array, offset: number, size: number): number {
  if (size === 0) return offset;
  out[offset++] = PADDING_TAG;
  offset = writeVarint(out, offset, size - 2);
  out.fill(0, offset, offset + size - 2);
  return offset + size - 2;
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

  /** A varint as a bigint: exact past 2^53. */
  bigVarint(): bigint {
    let value = 0n;
    let shift = 0n;
    for (let i = 0; i < 10; i++) {
      if (this.offset >= this.end) throw malformed('truncated varint');
      const byte = this.buffer[this.offset++] as number;
      value |= BigInt(byte & 0x7f) << shift;
      if (byte < 0x80) return value;
      shift += 7n;
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
      const header = reader.bytes();
      checkHeaderIntegers(header);
      chunk = { payload: { $case: 'header', value: TrainBatchHeader.decode(header) } };
    } else if (field === 2 && wireType === 2) {
      const body = reader.bytes();
      chunk = { payload: { $case: 'samples', value: decodeBlock(body) } };
    } else reader.skip(wireType);
  }
  return chunk;
}

// TrainBatchHeader's uint64 fields, which the generated codec turns into numbers: one over 2^53 − 1
// would throw there without a field name (and grpc-js would answer INTERNAL).
const headerIntegerFields = new Map<number, string>([
  [2, 'rollout_id'],
  [4, 'token_count'],
  [8, 'response_token_count'],
]);

function checkHeaderIntegers(header: Buffer): void {
  const reader = new Reader(header, 0, header.length);
  while (reader.offset < reader.end) {
    const tag = reader.varint();
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    const name = headerIntegerFields.get(field);
    if (name === undefined || wireType !== 0) {
      reader.skip(wireType);
      continue;
    }
    const value = reader.bigVarint();
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `train stream: TrainBatchHeader.${name} = ${value} is beyond 2^53 - 1`,
        details: { field: `header.${name}`, value: String(value) },
      });
    }
  }
}

function decodeBlock(body: Buffer): SampleBlock {
  // Every column empty until its field is read (the generated defaults).
  const block = SampleBlock.fromPartial({});
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

// A sample-block chunk handed to grpc-js unencoded. grpc-js (1.x, identity encoding) frames an
// outgoing message by allocating the frame and calling `message.copy(frame, 5)` with the message's
// `length` in the prefix: this writes the encoded chunk straight into that frame, so each column is
// copied once on the sending side instead of twice (into the message, then into the frame).
class DirectlyFramedChunk {
  readonly length: number;
  readonly byteLength: number;

  readonly #writer: TrainChunkWriter;

  constructor(writer: TrainChunkWriter) {
    this.#writer = writer;
    this.length = writer.size;
    this.byteLength = writer.size;
  }

  copy(target: Uint8Array, targetStart = 0): number {
    if (target.byteLength - targetStart < this.length) {
      throw new RangeError(
        `a frame of ${target.byteLength - targetStart} bytes cannot hold a ${this.length}-byte chunk`,
      );
    }
    this.#writer.write(target, targetStart);
    return this.length;
  }
}

/**
 * The client-side serializer of {@link directlyFramedTrainerServiceDefinition}: sample blocks become
 * objects that grpc-js writes into its frame themselves (see there); headers are encoded as usual.
 */
export function serializeTrainChunkForFraming(chunk: TrainChunk): Buffer {
  const payload = chunk.payload;
  if (payload?.$case !== 'samples') return encodeTrainChunk(chunk);
  // grpc-js only reads `length` and calls `copy` on it; typed as the Buffer it stands for.
  return new DirectlyFramedChunk(sampleChunkWriter(payload.value)) as unknown as Buffer;
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
    requestDeserialize: decodeTrainChunkOrError,
  },
} as const;

const decodeErrors = new WeakMap<TrainChunk, unknown>();

// grpc-js answers a deserializer that throws with INTERNAL ("Error deserializing request"): the
// server's deserializer hands the error on in an empty chunk instead, and the Train handler answers
// it with its own status (INVALID_ARGUMENT naming the field).
function decodeTrainChunkOrError(buffer: Buffer): TrainChunk {
  try {
    return decodeTrainChunk(buffer);
  } catch (error) {
    const chunk: TrainChunk = { payload: undefined };
    decodeErrors.set(chunk, error);
    return chunk;
  }
}

/** The error a received chunk could not be decoded with (see {@link trainerServiceDefinition}), or undefined. */
export function trainChunkDecodeError(chunk: TrainChunk): unknown {
  return decodeErrors.get(chunk);
}

/**
 * {@link trainerServiceDefinition} for clients whose channel does not compress messages: sample blocks
 * are encoded straight into grpc-js' frames ({@link serializeTrainChunkForFraming}), one copy of each
 * column fewer per batch. The wire bytes are the same.
 */
export const directlyFramedTrainerServiceDefinition = {
  ...trainerServiceDefinition,
  train: { ...trainerServiceDefinition.train, requestSerialize: serializeTrainChunkForFraming },
} as const;
