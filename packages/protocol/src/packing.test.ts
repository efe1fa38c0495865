import { describe, expect, it } from 'vitest';
import { DressageError } from './errors.js';
import {
  bytesPerElement,
  concatTypedArrays,
  type PackedType,
  packTypedArray,
  toTypedArray,
  unpackTypedArray,
} from './packing.js';

function catchError(run: () => unknown): DressageError {
  try {
    run();
  } catch (error) {
    if (DressageError.isInstance(error)) return error;
    throw error;
  }
  throw new Error('expected a DressageError');
}

const samples: { [K in PackedType]: number[] } = {
  int8: [-128, -1, 0, 1, 127],
  uint8: [0, 1, 254, 255],
  int16: [-32768, -2, 0, 3, 32767],
  uint16: [0, 1, 65535],
  int32: [-2147483648, -7, 0, 151645, 2147483647],
  uint32: [0, 1, 4294967295],
  float32: [-1.5, 0, 3.25, Number.POSITIVE_INFINITY],
  float64: [-0.1, 0, Math.PI, 1e300],
};

describe('packed typed arrays', () => {
  for (const type of Object.keys(samples) as PackedType[]) {
    it(`round-trips ${type}, including empty and odd lengths`, () => {
      for (const values of [[], samples[type], samples[type].slice(0, 3)]) {
        const array = toTypedArray(values, type);
        const bytes = packTypedArray(array);
        expect(bytes.byteLength).toBe(values.length * bytesPerElement(type));
        expect(Array.from(unpackTypedArray(bytes, type))).toEqual(Array.from(array));
      }
    });
  }

  it('writes little-endian bytes', () => {
    expect(Array.from(packTypedArray(new Int32Array([1, -2])))).toEqual([1, 0, 0, 0, 254, 255, 255, 255]);
    expect(Array.from(packTypedArray(new Float32Array([1])))).toEqual([0, 0, 128, 63]);
  });

  it('shares memory instead of copying on pack and on aligned unpack', () => {
    const array = new Int32Array([1, 2, 3, 4]);
    const bytes = packTypedArray(array.subarray(1, 3));
    expect(bytes.buffer).toBe(array.buffer);
    expect(bytes.byteOffset).toBe(4);
    const back = unpackTypedArray(bytes, 'int32');
    expect(back.buffer).toBe(array.buffer);
    expect(Array.from(back)).toEqual([2, 3]);
  });

  it('copies unaligned views once and reads them correctly', () => {
    const backing = new Uint8Array(1 + 8);
    backing.set(packTypedArray(new Int32Array([123456, -654321])), 1);
    const unaligned = backing.subarray(1);
    const values = unpackTypedArray(unaligned, 'int32');
    expect(Array.from(values)).toEqual([123456, -654321]);
    expect(values.buffer).not.toBe(backing.buffer);
  });

  it('reads unaligned Node Buffers (whose slice() is a view, not a copy)', () => {
    const pool = Buffer.alloc(3 + 12);
    pool.set(packTypedArray(new Float32Array([1.5, -2.25, 3])), 3);
    const unaligned = pool.subarray(3);
    expect(Array.from(unpackTypedArray(unaligned, 'float32'))).toEqual([1.5, -2.25, 3]);
    const ids = Buffer.alloc(1 + 8);
    ids.set(packTypedArray(new Int32Array([151645, -1])), 1);
    expect(Array.from(unpackTypedArray(ids.subarray(1), 'int32'))).toEqual([151645, -1]);
  });

  it('round-trips 10 million token ids', () => {
    const count = 10_000_000;
    const ids = new Int32Array(count);
    for (let i = 0; i < count; i++) ids[i] = (i * 2654435761) % 151_936;
    const bytes = packTypedArray(ids);
    // Simulate the wire: a fresh copy, as a decoder would hold it.
    const received = new Uint8Array(bytes);
    const back = unpackTypedArray(received, 'int32', { expectedLength: count });
    expect(back.length).toBe(count);
    let mismatches = 0;
    for (let i = 0; i < count; i++) if (back[i] !== ids[i]) mismatches++;
    expect(mismatches).toBe(0);
  });

  it('rejects truncated bytes with data_loss naming the field', () => {
    const bytes = packTypedArray(new Float32Array([1, 2, 3])).subarray(0, 11);
    const error = catchError(() => unpackTypedArray(bytes, 'float32', { field: 'rollout_log_probs' }));
    expect(error.code).toBe('data_loss');
    expect(error.message).toContain('rollout_log_probs');
    expect(error.message).toContain('11 bytes');
  });

  it('rejects a length that differs from the expected one', () => {
    const bytes = packTypedArray(new Int32Array([1, 2, 3]));
    const error = catchError(() => unpackTypedArray(bytes, 'int32', { expectedLength: 4, field: 'tokens' }));
    expect(error.code).toBe('invalid_argument');
    expect(error.details).toMatchObject({ field: 'tokens', expected_length: 4, length: 3 });
  });

  it('refuses values that a typed array would silently wrap', () => {
    expect(catchError(() => toTypedArray([1, 2, 256], 'uint8', 'loss_mask')).message).toContain(
      'loss_mask[2]',
    );
    expect(() => toTypedArray([1.5], 'int32')).toThrow(DressageError);
    expect(() => toTypedArray([2 ** 31], 'int32')).toThrow(/int32/);
    expect(() => toTypedArray([-1], 'uint32')).toThrow(/uint32/);
    expect(Array.from(toTypedArray([0.1], 'float64'))).toEqual([0.1]);
  });

  it('concatenates typed arrays', () => {
    const joined = concatTypedArrays('int32', [
      new Int32Array([1]),
      new Int32Array(0),
      new Int32Array([2, 3]),
    ]);
    expect(joined).toBeInstanceOf(Int32Array);
    expect(Array.from(joined)).toEqual([1, 2, 3]);
    expect(concatTypedArrays('float64', []).length).toBe(0);
  });
});
