// The Train stream's messages: a packed batch cut into a header and sample blocks, and assembled
// back (every block checked) on the trainer's side.
import type { SampleBlock, TrainBatchHeader, TrainChunk } from './gen/dressage/trainer/v1/trainer.js';
import {
  checkPackedLength,
  type PackedArrayByType,
  type PackedType,
  packTypedArray,
  unpackTypedArray,
} from './packing.js';
import {
  invalid,
  type PackedTrainBatch,
  type RoutedExpertsDtype,
  routedDtypes,
} from './train-batch-packing.js';
import { checkTrainBatchValues } from './train-batch-values.js';

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
  const routed = packed.routed_experts;
  const routedBytes = routed
    ? (length - 1) * routed.num_layers * routed.topk * routed.ids.BYTES_PER_ELEMENT
    : 0;
  return length * 4 + response * perResponseToken + routedBytes + 38;
}

/**
 * Splits a packed batch into the client-stream messages of `TrainerService.Train`: the header, then
 * sample blocks of at most `maxChunkBytes` each. The blocks are views over the packed arrays (no copy).
 */
export function trainBatchToChunks(
  packed: PackedTrainBatch,
  header: Omit<TrainBatchHeader, 'sample_count' | 'token_count' | 'response_token_count'>,
  options: ChunkOptions = {},
): TrainChunk[] {
  const maxBytes = options.maxChunkBytes ?? DEFAULT_MAX_CHUNK_BYTES;
  const chunks: TrainChunk[] = [
    {
      payload: {
        $case: 'header',
        value: {
          ...header,
          sample_count: packed.sample_count,
          token_count: packed.tokens.length,
          response_token_count: packed.loss_masks.length,
          ...(packed.routed_experts
            ? {
                routed_experts: {
                  dtype: packed.routed_experts.dtype,
                  num_layers: packed.routed_experts.num_layers,
                  topk: packed.routed_experts.topk,
                },
              }
            : {}),
        },
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

function bytesOf(array: Int32Array | Uint16Array | Uint8Array | Float32Array | Float64Array): Buffer {
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
  const routed = packed.routed_experts;
  let routedBytes: Buffer = empty;
  if (routed) {
    // Rows before this block: len(tokens) − 1 per earlier sample.
    const width = routed.num_layers * routed.topk;
    const first = (tokenStart - start) * width;
    const last = (tokenEnd - end) * width;
    routedBytes = bytesOf(routed.ids.subarray(first, last));
  }
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
    routed_experts: routedBytes,
    padding: empty,
  };
}

type ColumnName = Exclude<keyof PackedTrainBatch, 'sample_count' | 'routed_experts'>;

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

// One validated block: its columns as the received bytes (views into the decoded message). A logprob
// column is null when the block has response tokens but does not carry it.
type ReceivedBlock = Record<ColumnName, Uint8Array | null> & {
  sampleCount: number;
  tokenCount: number;
  responseTokens: number;
};

// One column of the batch being assembled. With a known size it is copied into one buffer as blocks
// arrive, so each received message can be collected right away (it dies young instead of being
// promoted with the rest of the stream). That buffer grows with what arrived, up to the announced
// size: a header is only a claim, and memory is reserved for bytes received, never for a promise (a
// 100-byte header announcing 2^31 tokens reserves nothing). Reserving 16x ahead allocates a batch of
// up to 16 blocks (64 MiB in the default 4 MiB chunks) once, and keeps the copies a larger batch pays
// for growth to a sixteenth of its size. Without a size the parts are kept and joined at the end: for a sender that does not announce
// response_token_count, and for a batch that arrived as a single block, whose column an adopting
// assembler keeps where it landed.
class ColumnBuilder {
  #bytes: Uint8Array | null = null;
  readonly #parts: Uint8Array[] = [];
  #written = 0;

  readonly #capacityBytes: number | null;
  readonly #adopt: boolean;

  constructor(capacityBytes: number | null, adopt = false) {
    this.#capacityBytes = capacityBytes;
    this.#adopt = adopt;
  }

  append(part: Uint8Array): void {
    if (part.byteLength === 0) return;
    if (this.#capacityBytes === null) this.#parts.push(part);
    else {
      const needed = this.#written + part.byteLength;
      if (this.#bytes === null || needed > this.#bytes.byteLength) this.#grow(needed);
      (this.#bytes as Uint8Array).set(part, this.#written);
    }
    this.#written += part.byteLength;
  }

  #grow(needed: number): void {
    const limit = Math.max(needed, this.#capacityBytes as number);
    const next = new Uint8Array(Math.min(limit, needed * COLUMN_GROWTH));
    if (this.#bytes !== null) next.set(this.#bytes.subarray(0, this.#written));
    this.#bytes = next;
  }

  finish<K extends ColumnName>(name: K): PackedArrayByType[(typeof columnTypes)[K]] {
    const type = columnTypes[name];
    // A single received part the assembler owns: a view where it is aligned (unpackTypedArray copies
    // it otherwise).
    if (this.#adopt && this.#parts.length === 1) return unpackTypedArray(this.#parts[0] as Uint8Array, type);
    let bytes = this.#bytes;
    if (this.#capacityBytes !== null) {
      bytes ??= new Uint8Array(0);
      if (bytes.byteLength !== this.#written) bytes = bytes.subarray(0, this.#written);
    } else {
      // Always a copy of received bytes, never a view of them: a decoder's bytes are views into a
      // message the caller may reuse (and a Node Buffer's `slice()` is a view too).
      bytes = new Uint8Array(this.#written);
      let offset = 0;
      for (const part of this.#parts) {
        bytes.set(part, offset);
        offset += part.byteLength;
      }
      this.#parts.length = 0;
    }
    return unpackTypedArray(bytes, type);
  }
}

// How far ahead of the received bytes a column reserves (see ColumnBuilder).
const COLUMN_GROWTH = 16;

type OptionalColumn = 'rollout_log_probs' | 'teacher_log_probs';
const optionalColumns = ['rollout_log_probs', 'teacher_log_probs'] as const;
const requiredColumns = [
  'tokens',
  'total_lengths',
  'response_lengths',
  'loss_masks',
  ...perSampleColumns,
] as const;

/** Options of {@link TrainBatchAssembler}. */
export interface TrainBatchAssemblerOptions {
  /**
   * The pushed blocks' bytes belong to the assembler: nothing else reads, writes or reuses the
   * memory they view (true of a decoder that hands out views into a message it received and then
   * drops, as the trainer server's does). A batch that arrives as one block then keeps its aligned
   * columns where they landed instead of copying them. Default false: every column is copied.
   */
  adoptBlockBytes?: boolean;
}

type RequiredColumn = (typeof requiredColumns)[number];

/**
 * Reassembles a `Train` stream on the receiving side, validating each block as it arrives, so a
 * server can reject a malformed stream before it has buffered all of it. When the header announces
 * the batch's sizes (`sample_count`, `token_count` and `response_token_count`, which
 * {@link trainBatchToChunks} sets), each block is copied into place on arrival: no received message
 * outlives its own block. Columns grow with the bytes that arrived (at most 16x ahead of them, never
 * past the header's counts), so a header alone reserves no memory. With `adoptBlockBytes`, a batch
 * sent as a single block needs no copy at all. Large batches are bound by copies and garbage
 * collection. {@link TrainBatchAssembler.finish} rejects non-finite values (see
 * {@link checkTrainBatchValues}).
 */
export class TrainBatchAssembler {
  #header: TrainBatchHeader | null = null;
  #columns: Record<RequiredColumn, ColumnBuilder> | null = null;
  #adopting = false;
  // Per logprob column: undefined until a block with response tokens says whether it is carried.
  readonly #optional: Record<OptionalColumn, ColumnBuilder | null | undefined> = {
    rollout_log_probs: undefined,
    teacher_log_probs: undefined,
  };
  readonly #routedParts: Uint8Array[] = [];
  #blockCount = 0;
  #samples = 0;
  #tokens = 0;
  #responseTokens = 0;
  #result: { header: TrainBatchHeader; batch: PackedTrainBatch } | null = null;

  readonly #options: TrainBatchAssemblerOptions;

  constructor(options: TrainBatchAssemblerOptions = {}) {
    this.#options = options;
  }

  /** Adds the next chunk of the stream. */
  push(chunk: TrainChunk): void {
    const payload = chunk.payload;
    if (payload === undefined) throw invalid('train stream: a chunk carries neither a header nor samples');
    if (payload.$case === 'header') {
      if (this.#header !== null) throw invalid('train stream: a second header arrived');
      this.#header = checkedHeader(payload.value);
      return;
    }
    const header = this.#header;
    if (header === null) throw invalid('train stream: sample block before the header');
    const block = receiveBlock(payload.value, this.#blockCount);
    const routed = receiveRoutedExperts(payload.value, header, this.#blockCount);
    this.#blockCount += 1;
    // Everything is checked before anything is copied: a rejected block writes nothing.
    if (this.#samples + block.sampleCount > header.sample_count) {
      throw invalid(
        `train stream: ${this.#samples + block.sampleCount} samples received, more than the header's ${header.sample_count}`,
      );
    }
    if (this.#tokens + block.tokenCount > header.token_count) {
      throw invalid(
        `train stream: ${this.#tokens + block.tokenCount} tokens received, more than the header's ${header.token_count}`,
      );
    }
    const announcedResponses = header.response_token_count;
    if (
      announcedResponses !== undefined &&
      this.#responseTokens + block.responseTokens > announcedResponses
    ) {
      throw invalid(
        `train stream: ${this.#responseTokens + block.responseTokens} response tokens received, more than the header's ${announcedResponses}`,
      );
    }
    // The whole batch in this one block: an owning assembler keeps its columns in place.
    const columns =
      this.#columns ??
      this.#startColumns(
        header,
        this.#options.adoptBlockBytes === true && block.sampleCount === header.sample_count,
      );
    if (block.responseTokens > 0) {
      for (const name of optionalColumns) {
        const carried = block[name] !== null;
        const known = this.#optional[name];
        if (known === undefined) {
          this.#optional[name] = carried ? this.#responseColumn(header, 4) : null;
        } else if ((known !== null) !== carried) {
          throw invalid(`train stream: ${name} present in some blocks only`);
        }
      }
    }
    for (const name of requiredColumns) columns[name].append(block[name] as Uint8Array);
    if (block.responseTokens > 0) {
      for (const name of optionalColumns) this.#optional[name]?.append(block[name] as Uint8Array);
    }
    // Routed experts are a small column next to the tokens: kept as received parts, joined once.
    if (routed !== null) this.#routedParts.push(Uint8Array.from(routed));
    this.#samples += block.sampleCount;
    this.#tokens += block.tokenCount;
    this.#responseTokens += block.responseTokens;
  }

  /** Checks the totals against the header and the values (all finite), and returns the packed batch. */
  finish(): { header: TrainBatchHeader; batch: PackedTrainBatch } {
    if (this.#result !== null) return this.#result;
    const header = this.#header;
    if (header === null) throw invalid('train stream: ended without a header');
    const announcedResponses = header.response_token_count;
    const responsesDiffer = announcedResponses !== undefined && this.#responseTokens !== announcedResponses;
    if (this.#samples !== header.sample_count || this.#tokens !== header.token_count || responsesDiffer) {
      throw invalid(
        `train stream: ended after ${this.#samples} samples / ${this.#tokens} tokens, header announced ${header.sample_count} / ${header.token_count}${responsesDiffer ? ` (${this.#responseTokens} response tokens of ${announcedResponses})` : ''}`,
        {
          received_samples: this.#samples,
          received_tokens: this.#tokens,
          received_response_tokens: this.#responseTokens,
        },
      );
    }
    const columns = this.#columns ?? this.#startColumns(header, false);
    const batch: PackedTrainBatch = {
      sample_count: this.#samples,
      tokens: columns.tokens.finish('tokens'),
      total_lengths: columns.total_lengths.finish('total_lengths'),
      response_lengths: columns.response_lengths.finish('response_lengths'),
      loss_masks: columns.loss_masks.finish('loss_masks'),
      rollout_log_probs: this.#optional.rollout_log_probs?.finish('rollout_log_probs') ?? null,
      teacher_log_probs: this.#optional.teacher_log_probs?.finish('teacher_log_probs') ?? null,
      rollout_ids: columns.rollout_ids.finish('rollout_ids'),
      rewards: columns.rewards.finish('rewards'),
      raw_rewards: columns.raw_rewards.finish('raw_rewards'),
      rollout_mask_sums: columns.rollout_mask_sums.finish('rollout_mask_sums'),
      truncated: columns.truncated.finish('truncated'),
      sample_indices: columns.sample_indices.finish('sample_indices'),
    };
    const layout = header.routed_experts;
    if (layout !== undefined) {
      let length = 0;
      for (const part of this.#routedParts) length += part.byteLength;
      const bytes = new Uint8Array(length);
      let offset = 0;
      for (const part of this.#routedParts) {
        bytes.set(part, offset);
        offset += part.byteLength;
      }
      this.#routedParts.length = 0;
      batch.routed_experts = {
        dtype: layout.dtype as RoutedExpertsDtype,
        num_layers: layout.num_layers,
        topk: layout.topk,
        ids: unpackTypedArray(bytes, layout.dtype as RoutedExpertsDtype),
      };
    }
    this.#columns = null;
    checkTrainBatchValues(batch);
    this.#result = { header, batch };
    return this.#result;
  }

  #startColumns(header: TrainBatchHeader, adopt: boolean): Record<RequiredColumn, ColumnBuilder> {
    this.#adopting = adopt;
    const samples = header.sample_count;
    const sized = (bytes: number) => new ColumnBuilder(adopt ? null : bytes, adopt);
    this.#columns = {
      tokens: sized(header.token_count * 4),
      total_lengths: sized(samples * 4),
      response_lengths: sized(samples * 4),
      loss_masks: this.#responseColumn(header, 1),
      rollout_ids: sized(samples * 4),
      rewards: sized(samples * 4),
      raw_rewards: sized(samples * 4),
      rollout_mask_sums: sized(samples * 8),
      truncated: sized(samples),
      sample_indices: sized(samples * 4),
    };
    return this.#columns;
  }

  #responseColumn(header: TrainBatchHeader, bytesPerToken: number): ColumnBuilder {
    const responses = header.response_token_count;
    const unknown = this.#adopting || responses === undefined;
    return new ColumnBuilder(unknown ? null : responses * bytesPerToken, this.#adopting);
  }
}

// A block's routed experts, checked against the header's layout: len(tokens) − 1 rows per sample.
function receiveRoutedExperts(
  block: SampleBlock,
  header: TrainBatchHeader,
  index: number,
): Uint8Array | null {
  const layout = header.routed_experts;
  const bytes = block.routed_experts ?? new Uint8Array(0);
  if (layout === undefined) {
    if (bytes.byteLength > 0) {
      throw invalid(`samples block ${index}: routed_experts without a routed_experts layout in the header`, {
        field: 'routed_experts',
      });
    }
    return null;
  }
  const totals = unpackTypedArray(block.total_lengths, 'int32');
  let rows = 0;
  for (let i = 0; i < totals.length; i++) rows += (totals[i] as number) - 1;
  checkPackedLength(bytes, layout.dtype as RoutedExpertsDtype, {
    expectedLength: rows * layout.num_layers * layout.topk,
    field: `samples block ${index}: routed_experts`,
  });
  return bytes;
}

// The header's counts, checked before anything is allocated from them.
function checkedHeader(header: TrainBatchHeader): TrainBatchHeader {
  const layout = header.routed_experts;
  if (
    layout !== undefined &&
    (!routedDtypes.includes(layout.dtype as RoutedExpertsDtype) || layout.num_layers <= 0 || layout.topk <= 0)
  ) {
    throw invalid(
      `train stream: routed_experts layout ${JSON.stringify(layout)} needs dtype uint8, uint16 or int32 and a positive num_layers and topk`,
      { field: 'routed_experts' },
    );
  }
  const tokens = header.token_count;
  const responses = header.response_token_count;
  if (!Number.isSafeInteger(tokens) || (responses !== undefined && !Number.isSafeInteger(responses))) {
    throw invalid('train stream: the header announces an impossible token count', {
      token_count: tokens,
      response_token_count: responses,
    });
  }
  if (responses !== undefined && responses > tokens) {
    throw invalid(
      `train stream: the header announces ${responses} response tokens, more than its ${tokens} tokens`,
    );
  }
  return header;
}

// True when every byte is 0 or 1. Eight bytes at a time over the aligned middle: masks are most of
// a block's per-token bytes after the token ids.
function isBinaryMask(bytes: Uint8Array): boolean {
  const start = bytes.byteOffset;
  const end = start + bytes.byteLength;
  const alignedStart = Math.min(end, (start + 7) & ~7);
  const alignedEnd = Math.max(alignedStart, end & ~7);
  let bits = 0;
  for (let i = 0; i < alignedStart - start; i++) bits |= bytes[i] as number;
  for (let i = alignedEnd - start; i < bytes.byteLength; i++) bits |= bytes[i] as number;
  if (alignedEnd > alignedStart) {
    const words = new Int32Array(bytes.buffer, alignedStart, (alignedEnd - alignedStart) / 4);
    let wordBits = 0;
    for (let i = 0; i < words.length; i++) wordBits |= words[i] as number;
    bits |= wordBits;
  }
  return (bits & 0xfefefefe) === 0;
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
  if (!isBinaryMask(lossMasks)) {
    const at = lossMasks.findIndex((value) => value > 1);
    throw invalid(`${field('loss_masks')}[${at}] is ${lossMasks[at]}, not 0 or 1`);
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
