import { DressageError } from './errors.js';

/** Element types a packed `bytes` field can hold. All are little-endian on the wire. */
export type PackedType = 'int8' | 'uint8' | 'int16' | 'uint16' | 'int32' | 'uint32' | 'float32' | 'float64';

/** The typed array class for each {@link PackedType}. */
export interface PackedArrayByType {
  int8: Int8Array;
  uint8: Uint8Array;
  int16: Int16Array;
  uint16: Uint16Array;
  int32: Int32Array;
  uint32: Uint32Array;
  float32: Float32Array;
  float64: Float64Array;
}

/** Any typed array {@link packTypedArray} accepts. */
export type PackableArray = PackedArrayByType[PackedType];

type TypedArrayConstructor<T> = {
  new (length: number): T;
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): T;
  readonly BYTES_PER_ELEMENT: number;
};

const constructors: { [K in PackedType]: TypedArrayConstructor<PackedArrayByType[K]> } = {
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  float32: Float32Array,
  float64: Float64Array,
};

/** True when this process stores numbers little-endian, so views can be shared without copying. */
export const hostIsLittleEndian: boolean = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Bytes per element of a packed type. */
export function bytesPerElement(type: PackedType): number {
  return constructors[type].BYTES_PER_ELEMENT;
}

function packedTypeOf(array: PackableArray): PackedType {
  if (array instanceof Int8Array) return 'int8';
  if (array instanceof Uint8Array) return 'uint8';
  if (array instanceof Int16Array) return 'int16';
  if (array instanceof Uint16Array) return 'uint16';
  if (array instanceof Int32Array) return 'int32';
  if (array instanceof Uint32Array) return 'uint32';
  if (array instanceof Float32Array) return 'float32';
  return 'float64';
}

/**
 * The little-endian bytes of a typed array. On little-endian hosts (every platform Node supports
 * in practice) this is a view over the same memory: no copy.
 */
export function packTypedArray(array: PackableArray): Uint8Array {
  if (hostIsLittleEndian || array.BYTES_PER_ELEMENT === 1) {
    return new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
  }
  return swapToLittleEndian(array, packedTypeOf(array));
}

/** Options of {@link unpackTypedArray}. */
export interface UnpackOptions {
  /** Number of elements the field must hold; a mismatch is an error. */
  expectedLength?: number;
  /** Field name used in error messages. */
  field?: string;
}

/**
 * Reads a packed `bytes` field as a typed array. Zero-copy when the bytes are suitably aligned (a
 * decoder usually hands out views into the received message); otherwise the bytes are copied once.
 * Throws a `data_loss` DressageError when the byte length is not a whole number of elements, or
 * `invalid_argument` when it does not match `expectedLength`.
 */
export function unpackTypedArray<K extends PackedType>(
  bytes: Uint8Array,
  type: K,
  options: UnpackOptions = {},
): PackedArrayByType[K] {
  const ctor = constructors[type];
  const size = ctor.BYTES_PER_ELEMENT;
  const length = checkPackedLength(bytes, type, options);
  if (!hostIsLittleEndian && size > 1) return readLittleEndian(bytes, type, length);
  if (bytes.byteOffset % size === 0) return new ctor(bytes.buffer, bytes.byteOffset, length);
  // Unaligned view: one copy into a fresh, aligned buffer. (Not `bytes.slice()`: on a Node Buffer
  // that is a view sharing the original memory, not a copy.)
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new ctor(copy.buffer, 0, length);
}

/**
 * The checks of {@link unpackTypedArray} without reading the elements: returns the element count,
 * or throws `data_loss` (not a whole number of elements) / `invalid_argument` (not `expectedLength`).
 * @internal
 */
export function checkPackedLength(bytes: Uint8Array, type: PackedType, options: UnpackOptions = {}): number {
  const size = constructors[type].BYTES_PER_ELEMENT;
  const field = options.field ?? 'packed array';
  if (bytes.byteLength % size !== 0) {
    throw new DressageError({
      code: 'data_loss',
      message: `${field}: ${bytes.byteLength} bytes is not a whole number of ${type} elements (${size} bytes each); the data is truncated or of another type`,
      details: { field, type, byte_length: bytes.byteLength },
    });
  }
  const length = bytes.byteLength / size;
  if (options.expectedLength !== undefined && length !== options.expectedLength) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${field}: expected ${options.expectedLength} ${type} elements, got ${length}`,
      details: { field, type, expected_length: options.expectedLength, length },
    });
  }
  return length;
}

/** Concatenates typed arrays of one type into a single new array. */
export function concatTypedArrays<K extends PackedType>(
  type: K,
  parts: readonly PackedArrayByType[K][],
): PackedArrayByType[K] {
  let total = 0;
  for (const part of parts) total += part.length;
  const out = new constructors[type](total);
  let offset = 0;
  for (const part of parts) {
    (out as unknown as { set(source: ArrayLike<number>, offset: number): void }).set(part, offset);
    offset += part.length;
  }
  return out;
}

const integerRanges: Partial<Record<PackedType, readonly [number, number]>> = {
  int8: [-128, 127],
  uint8: [0, 255],
  int16: [-32768, 32767],
  uint16: [0, 65535],
  int32: [-2147483648, 2147483647],
  uint32: [0, 4294967295],
};

/**
 * Copies plain numbers into a typed array, checking that every value fits the type (typed arrays
 * would otherwise wrap or truncate silently). Floats accept any finite or non-finite number.
 */
export function toTypedArray<K extends PackedType>(
  values: ArrayLike<number>,
  type: K,
  field = 'values',
): PackedArrayByType[K] {
  const out = new constructors[type](values.length) as unknown as { [index: number]: number };
  const range = integerRanges[type];
  if (range === undefined) {
    for (let i = 0; i < values.length; i++) out[i] = values[i] as number;
    return out as unknown as PackedArrayByType[K];
  }
  const [low, high] = range;
  for (let i = 0; i < values.length; i++) {
    const value = values[i] as number;
    if (!Number.isInteger(value) || value < low || value > high) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `${field}[${i}]: ${value} is not a ${type} (integer in [${low}, ${high}])`,
        details: { field, index: i, type },
      });
    }
    out[i] = value;
  }
  return out as unknown as PackedArrayByType[K];
}

function swapToLittleEndian(array: PackableArray, type: PackedType): Uint8Array {
  const out = new Uint8Array(array.byteLength);
  const view = new DataView(out.buffer);
  const size = array.BYTES_PER_ELEMENT;
  for (let i = 0; i < array.length; i++) writeElement(view, i * size, type, array[i] as number);
  return out;
}

function readLittleEndian<K extends PackedType>(
  bytes: Uint8Array,
  type: K,
  length: number,
): PackedArrayByType[K] {
  const out = new constructors[type](length) as unknown as { [index: number]: number };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = bytesPerElement(type);
  for (let i = 0; i < length; i++) out[i] = readElement(view, i * size, type);
  return out as unknown as PackedArrayByType[K];
}

function writeElement(view: DataView, offset: number, type: PackedType, value: number): void {
  switch (type) {
    case 'int16':
      view.setInt16(offset, value, true);
      return;
    case 'uint16':
      view.setUint16(offset, value, true);
      return;
    case 'int32':
      view.setInt32(offset, value, true);
      return;
    case 'uint32':
      view.setUint32(offset, value, true);
      return;
    case 'float32':
      view.setFloat32(offset, value, true);
      return;
    case 'float64':
      view.setFloat64(offset, value, true);
      return;
    default:
      view.setUint8(offset, value);
      return;
  }
}

function readElement(view: DataView, offset: number, type: PackedType): number {
  switch (type) {
    case 'int16':
      return view.getInt16(offset, true);
    case 'uint16':
      return view.getUint16(offset, true);
    case 'int32':
      return view.getInt32(offset, true);
    case 'uint32':
      return view.getUint32(offset, true);
    case 'float32':
      return view.getFloat32(offset, true);
    case 'float64':
      return view.getFloat64(offset, true);
    default:
      return view.getUint8(offset);
  }
}
