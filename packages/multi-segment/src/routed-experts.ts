import { DressageError, type RoutedExpertsChunk } from '@dressage/protocol';

/**
 * The routed experts (MoE routing replay, R3) of one sample: `rows × numLayers × topk` expert ids,
 * row-major, row `r` being the routing of token position `r` (`len(tokens) − 1` rows: the last
 * token was never fed to the model).
 */
export interface RoutedExperts {
  rows: number;
  numLayers: number;
  topk: number;
  /** `rows × numLayers × topk` ids, widened to int32 whatever the wire dtype. */
  ids: Int32Array;
  /** The width the engine recorded them in (the widest of the chunks'); the trainer wire keeps it. */
  dtype?: RoutedExpertsChunk['dtype'];
}

/** The model shape routed experts are decoded to (slime's `--num-layers`, `--moe-router-topk`). */
export interface RoutedExpertsShape {
  numLayers: number;
  moeRouterTopk: number;
}

const bytesPerId = { uint8: 1, uint16: 2, int32: 4 } as const;

const base64Pattern = /^[A-Za-z0-9+/]*={0,2}$/;

function invalid(message: string, details: Record<string, unknown>): DressageError {
  return new DressageError({ code: 'invalid_argument', message, details });
}

function checkShape(shape: RoutedExpertsShape, where: string): void {
  for (const [name, value] of [
    ['numLayers', shape.numLayers],
    ['moeRouterTopk', shape.moeRouterTopk],
  ] as const) {
    if (!Number.isInteger(value) || value <= 0) {
      throw invalid(`${where}: ${name} must be a positive integer, got ${value}`, { field: name });
    }
  }
}

/** Options that may name the model shape (unset: null or undefined). */
export interface RoutedExpertsShapeOptions {
  numLayers?: number | null;
  moeRouterTopk?: number | null;
}

/** The model shape of `options`, or null when either part is unset. */
export function routedExpertsShapeOf(options: RoutedExpertsShapeOptions): RoutedExpertsShape | null {
  const { numLayers, moeRouterTopk } = options;
  if (numLayers === null || numLayers === undefined || moeRouterTopk === null || moeRouterTopk === undefined)
    return null;
  return { numLayers, moeRouterTopk };
}

/**
 * The model shape routing replay needs: an `invalid_argument` error naming `where` and the field when
 * `numLayers` or `moeRouterTopk` is unset or not a positive integer.
 */
export function requireRoutedExpertsShape(
  options: RoutedExpertsShapeOptions,
  where: string,
): RoutedExpertsShape {
  const shape = routedExpertsShapeOf(options);
  if (shape === null) {
    const field =
      options.numLayers === null || options.numLayers === undefined ? 'numLayers' : 'moeRouterTopk';
    throw invalid(`${where}: routing replay needs numLayers and moeRouterTopk to decode routed experts`, {
      field,
    });
  }
  checkShape(shape, where);
  return shape;
}

/** All-zero routed experts of `rows` rows (what a removed sample without routing trains on). */
export function zeroRoutedExperts(rows: number, shape: RoutedExpertsShape): RoutedExperts {
  const count = Math.max(0, rows);
  return {
    rows: count,
    numLayers: shape.numLayers,
    topk: shape.moeRouterTopk,
    ids: new Int32Array(count * shape.numLayers * shape.moeRouterTopk),
  };
}

// One chunk's ids as int32 (the wire is little-endian, as are the hosts we run on). The chunk's
// fields have their schema's types; what the schema cannot see is checked here: base64 text, whole
// rows, and a row count that agrees with the payload.
function decodeChunk(chunk: RoutedExpertsChunk, index: number, rowWidth: number, at: string): Int32Array {
  const field = `routed_experts_chunks[${index}]`;
  const { data, dtype, row_count: rowCount } = chunk;
  if (!base64Pattern.test(data)) {
    throw invalid(`${at}: ${field}.data is not base64 text`, { field: `${field}.data` });
  }
  const bytes = Buffer.from(data, 'base64');
  const size = bytesPerId[dtype];
  const idCount = bytes.length / size;
  if (!Number.isInteger(idCount) || idCount % rowWidth !== 0) {
    throw invalid(
      `${at}: ${field} holds ${bytes.length} bytes, not whole rows of ${rowWidth} ${dtype} ids (numLayers × moeRouterTopk)`,
      { field: `${field}.data` },
    );
  }
  const rows = idCount / rowWidth;
  if (rows !== rowCount) {
    throw invalid(`${at}: ${field} decodes to ${rows} rows but its row_count is ${rowCount}`, {
      field: `${field}.row_count`,
      expected: rowCount,
      actual: rows,
    });
  }
  // Copy out of Buffer's shared pool: typed-array views need an aligned, private buffer.
  const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
  if (dtype === 'int32') return new Int32Array(copy);
  const ids = new Int32Array(idCount);
  ids.set(dtype === 'uint16' ? new Uint16Array(copy) : new Uint8Array(copy));
  return ids;
}

/**
 * Decodes a segment's `routed_experts_chunks` (base64 `uint8` / `uint16` / `int32`) into one
 * {@link RoutedExperts}: chunks are concatenated in order, then cut to `tokenCount − 1` rows
 * (`tokenCount` after the token cap). `where` names the segment in errors.
 *
 * Errors (`invalid_argument`, naming the segment and the chunk field): text that is not base64, a
 * payload that is not whole rows of `numLayers × moeRouterTopk` ids, rows other than the chunk's
 * `row_count`, and fewer rows in all than `tokenCount − 1`.
 *
 * @returns null when there are no chunks
 */
export function decodeRoutedExperts(
  chunks: readonly RoutedExpertsChunk[] | undefined,
  shape: RoutedExpertsShape,
  tokenCount: number,
  where: string,
): RoutedExperts | null {
  if (chunks === undefined || chunks.length === 0) return null;
  checkShape(shape, where);
  const rowWidth = shape.numLayers * shape.moeRouterTopk;
  const decoded: Int32Array[] = [];
  let total = 0;
  let dtype: RoutedExpertsChunk['dtype'] = 'uint8';
  chunks.forEach((chunk, index) => {
    const ids = decodeChunk(chunk, index, rowWidth, where);
    if (bytesPerId[chunk.dtype] > bytesPerId[dtype]) dtype = chunk.dtype;
    decoded.push(ids);
    total += ids.length / rowWidth;
  });
  const expected = Math.max(0, tokenCount - 1);
  if (total < expected) {
    throw invalid(
      `${where}: routed_experts_chunks hold ${total} rows but its ${tokenCount} tokens need ${expected} (len(tokens) - 1)`,
      { field: 'routed_experts_chunks', expected, actual: total },
    );
  }
  let ids: Int32Array;
  const only = decoded.length === 1 ? decoded[0] : undefined;
  if (only !== undefined) {
    // A cut copies: a view would keep (and clone, with the sample) every row past the cap.
    ids = only.length === expected * rowWidth ? only : only.slice(0, expected * rowWidth);
  } else {
    ids = new Int32Array(expected * rowWidth);
    let offset = 0;
    for (const part of decoded) {
      if (offset >= ids.length) break;
      const take = part.subarray(0, ids.length - offset);
      ids.set(take, offset);
      offset += take.length;
    }
  }
  return { rows: expected, numLayers: shape.numLayers, topk: shape.moeRouterTopk, ids, dtype };
}
