import { DressageError } from '@dressage/protocol';
import { hostIsLittleEndian } from '@dressage/protocol/internal';

/** One float32 tensor of a safetensors file. */
export interface SafetensorsTensor {
  name: string;
  shape: number[];
  values: Float32Array;
}

// The reference implementation refuses larger headers; so do we (a corrupt length is then caught early).
const maxHeaderBytes = 100_000_000;

function corrupt(source: string, message: string): DressageError {
  return new DressageError({
    code: 'data_loss',
    message: `${source}: not a valid safetensors file: ${message}`,
    details: { path: source },
  });
}

function assertLittleEndian(): void {
  if (!hostIsLittleEndian) {
    throw new DressageError({ code: 'unimplemented', message: 'safetensors needs a little-endian host' });
  }
}

/**
 * Encodes float32 tensors as a safetensors file, in the given order: 8 bytes of little-endian
 * header length, a JSON header (`dtype`, `shape`, `data_offsets` per tensor, string `__metadata__`)
 * padded with spaces so the data starts 8-byte aligned, then the raw little-endian bytes. The
 * format Python (`safetensors`, PyTorch) and the Megatron worker read.
 */
/** One tensor of a safetensors header. */
interface SafetensorsHeaderEntry {
  dtype: 'F32';
  shape: readonly number[];
  data_offsets: [number, number];
}

export function encodeSafetensors(
  tensors: readonly SafetensorsTensor[],
  metadata: Readonly<Record<string, string>> = {},
): Uint8Array {
  assertLittleEndian();
  // Tensor entries by name, and the string metadata under `__metadata__`.
  const header: Record<string, SafetensorsHeaderEntry | Readonly<Record<string, string>>> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const tensor of tensors) {
    const count = tensor.shape.reduce((product, size) => product * size, 1);
    if (count !== tensor.values.length) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `safetensors: tensor ${tensor.name} has ${tensor.values.length} values for shape [${tensor.shape.join(', ')}]`,
      });
    }
    header[tensor.name] = { dtype: 'F32', shape: tensor.shape, data_offsets: [offset, offset + count * 4] };
    offset += count * 4;
  }
  const text = JSON.stringify(header);
  const headerBytes = new TextEncoder().encode(text + ' '.repeat((8 - (Buffer.byteLength(text) % 8)) % 8));
  const bytes = new Uint8Array(8 + headerBytes.length + offset);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  bytes.set(headerBytes, 8);
  let position = 8 + headerBytes.length;
  for (const tensor of tensors) {
    const { values } = tensor;
    bytes.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength), position);
    position += values.byteLength;
  }
  return bytes;
}

/**
 * Decodes a safetensors file holding float32 tensors (copied into aligned arrays), in file order.
 * @throws DressageError `data_loss` for a malformed file, `unimplemented` for a dtype other than F32.
 */
export function decodeSafetensors(
  bytes: Uint8Array,
  source = 'safetensors',
): { tensors: SafetensorsTensor[]; metadata: Record<string, string> } {
  assertLittleEndian();
  if (bytes.byteLength < 8) throw corrupt(source, 'shorter than its 8-byte header length');
  const length = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  if (length > BigInt(maxHeaderBytes) || 8 + Number(length) > bytes.byteLength) {
    throw corrupt(source, `header length ${length} does not fit the ${bytes.byteLength}-byte file`);
  }
  let header: unknown;
  try {
    header = JSON.parse(
      new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, 8 + Number(length))),
    );
  } catch (error) {
    throw corrupt(source, `header is not JSON (${(error as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    throw corrupt(source, 'header is not a JSON object');
  }
  const metadata = '__metadata__' in header ? header.__metadata__ : undefined;
  const body = bytes.subarray(8 + Number(length));
  const tensors: SafetensorsTensor[] = [];
  for (const [name, raw] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const entry = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    const shape = entry.shape;
    const offsets = entry.data_offsets;
    if (
      !Array.isArray(shape) ||
      !shape.every((size) => Number.isSafeInteger(size) && size >= 0) ||
      !Array.isArray(offsets) ||
      offsets.length !== 2 ||
      !offsets.every((value) => Number.isSafeInteger(value) && value >= 0)
    ) {
      throw corrupt(source, `tensor ${name}: malformed entry`);
    }
    if (entry.dtype !== 'F32') {
      throw new DressageError({
        code: 'unimplemented',
        message: `${source}: tensor ${name} is ${String(entry.dtype)}; only F32 tensors are read`,
        details: { path: source, name },
      });
    }
    const [start, end] = offsets as [number, number];
    const count = (shape as number[]).reduce((product, size) => product * size, 1);
    if (end > body.byteLength || end - start !== count * 4) {
      throw corrupt(
        source,
        `tensor ${name}: bytes ${start}..${end} do not hold shape [${shape.join(', ')}] of F32`,
      );
    }
    // Copy into an aligned buffer: the data need not start at a multiple of 4 in `bytes`.
    const values = new Float32Array(count);
    new Uint8Array(values.buffer).set(body.subarray(start, end));
    tensors.push({ name, shape: shape as number[], values });
  }
  const strings: Record<string, string> = {};
  if (typeof metadata === 'object' && metadata !== null) {
    for (const [key, value] of Object.entries(metadata)) strings[key] = String(value);
  }
  return { tensors, metadata: strings };
}
