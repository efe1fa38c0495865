import { DressageError } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import type { ModelConfig } from './model-config.js';
import {
  disposeCache,
  maskValue,
  type SequenceCache,
  type StackedStepInput,
  type StackedStepOutput,
} from './sequence-cache.js';

interface BatchRow<TOwner> {
  owner: TOwner;
  /** Per column: 1 where the column holds one of this row's positions, 0 for a hole. */
  valid: number[];
  /** Positions held (the next token's position). */
  length: number;
}

/**
 * Sequences decoded together (continuous batching). Their key/value caches live stacked in one
 * `[rows, heads, columns, headDimension]` tensor per layer; each step appends one column for every
 * row, so a step is a constant number of operations however many rows there are. Rows that joined
 * shorter than others leave holes, which an additive mask hides: attention does not depend on where
 * a key sits (positions are in the embeddings, or rotated into each key when it was computed), so
 * holes change no result.
 *
 * Create one with {@link CausalLanguageModel.createDecodeBatch}; free it with
 * {@link DecodeBatch.clear}.
 */
export class DecodeBatch<TOwner = unknown> {
  readonly #config: ModelConfig;
  readonly #step: (input: StackedStepInput) => StackedStepOutput;
  readonly #alibiSlopes: Float64Array | null;
  #rows: BatchRow<TOwner>[] = [];
  #keys: tf.Tensor4D[] = [];
  #values: tf.Tensor4D[] = [];
  #columns = 0;

  /** @internal Use {@link CausalLanguageModel.createDecodeBatch}. */
  constructor(
    config: ModelConfig,
    step: (input: StackedStepInput) => StackedStepOutput,
    alibiSlopes: Float64Array | null = null,
  ) {
    this.#config = config;
    this.#step = step;
    this.#alibiSlopes = alibiSlopes;
  }

  /** The rows' owners, in row order (the order of {@link DecodeBatch.step}'s slots and logits). */
  get owners(): TOwner[] {
    return this.#rows.map((row) => row.owner);
  }

  /** Rows held. */
  get size(): number {
    return this.#rows.length;
  }

  /** Columns of the stacked caches (at least the longest row). */
  get columns(): number {
    return this.#columns;
  }

  /** True when `owner` has a row. */
  has(owner: TOwner): boolean {
    return this.#rows.some((row) => row.owner === owner);
  }

  /** Positions held for `owner` (the next token's position), or -1. */
  lengthOf(owner: TOwner): number {
    return this.#rows.find((row) => row.owner === owner)?.length ?? -1;
  }

  /** Adds a row from a prefill cache, taking ownership of (and freeing) the cache's tensors. */
  add(owner: TOwner, cache: SequenceCache): void {
    if (this.has(owner)) {
      disposeCache(cache);
      throw new DressageError({
        code: 'already_exists',
        message: 'This owner already has a row in the batch',
      });
    }
    const length = cache.length;
    const columns = Math.max(this.#columns, length);
    const merge = (stacked: tf.Tensor4D | undefined, rowCache: tf.Tensor3D) =>
      tf.tidy(() => {
        const row = padColumns(rowCache.expandDims(0) as tf.Tensor4D, columns);
        return stacked === undefined
          ? row
          : (tf.concat([padColumns(stacked, columns), row], 0) as tf.Tensor4D);
      });
    const keys = cache.keys.map((key, layer) => merge(this.#keys[layer], key));
    const values = cache.values.map((value, layer) => merge(this.#values[layer], value));
    this.#replace(keys, values);
    disposeCache(cache);
    for (const row of this.#rows) row.valid.push(...new Array<number>(columns - this.#columns).fill(0));
    const valid = new Array<number>(columns).fill(0);
    valid.fill(1, 0, length);
    this.#rows.push({ owner, valid, length });
    this.#columns = columns;
  }

  /** Drops `owner`'s row; returns false when it has none. */
  remove(owner: TOwner): boolean {
    const index = this.#rows.findIndex((row) => row.owner === owner);
    if (index < 0) return false;
    this.#rows.splice(index, 1);
    if (this.#rows.length === 0) {
      this.clear();
      return true;
    }
    const kept = tf.tensor1d(
      [...Array(this.#rows.length + 1).keys()].filter((row) => row !== index),
      'int32',
    );
    this.#replace(
      this.#keys.map((key) => tf.gather(key, kept, 0)),
      this.#values.map((value) => tf.gather(value, kept, 0)),
    );
    kept.dispose();
    return true;
  }

  /** Drops every row and frees the caches. */
  clear(): void {
    this.#replace([], []);
    this.#rows = [];
    this.#columns = 0;
  }

  /**
   * One decode step: reads one token per row (input `slots` in row order) at the row's next
   * position and returns next-token logits `[rows, outputs]` (caller-owned).
   * @throws DressageError `out_of_range` when a row is at the context length.
   */
  step(slots: readonly number[]): tf.Tensor2D {
    const rows = this.#rows;
    if (slots.length !== rows.length || rows.length === 0) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `A step of ${rows.length} rows got ${slots.length} slots`,
      });
    }
    if (rows.some((row) => row.length >= this.#config.contextLength)) {
      throw new DressageError({ code: 'out_of_range', message: 'A batch row is at the context length' });
    }
    this.#compactWhenSparse();
    const columns = this.#columns + 1;
    const slopes = this.#alibiSlopes;
    const mask = new Float32Array(rows.length * (slopes?.length ?? 1) * columns);
    rows.forEach((row, index) => {
      if (slopes === null) {
        for (let column = 0; column < this.#columns; column++) {
          if (row.valid[column] === 0) mask[index * columns + column] = maskValue;
        }
        return;
      }
      // ALiBi: a valid column's key sits at the count of valid columns before it; the query (and
      // the new column) at the row's length.
      slopes.forEach((slope, head) => {
        const offset = (index * slopes.length + head) * columns;
        let position = 0;
        for (let column = 0; column < this.#columns; column++) {
          if (row.valid[column] === 0) mask[offset + column] = maskValue;
          else mask[offset + column] = -slope * (row.length - position++);
        }
      });
    });
    const { logits, keys, values } = this.#step({
      keys: this.#keys,
      values: this.#values,
      columns: this.#columns,
      slots: [...slots],
      positions: rows.map((row) => row.length),
      mask,
    });
    this.#replace(keys, values);
    this.#columns = columns;
    for (const row of rows) {
      row.valid.push(1);
      row.length += 1;
    }
    return logits;
  }

  // Holes accumulate as long rows leave; once they outnumber the positions, gather each row's own
  // columns into a dense stack again.
  #compactWhenSparse(): void {
    const longest = Math.max(...this.#rows.map((row) => row.length));
    if (this.#columns <= 2 * longest + 16) return;
    const compact = (stacked: tf.Tensor4D) =>
      tf.tidy(
        () =>
          tf.concat(
            this.#rows.map((row, index) => {
              const columns = row.valid.flatMap((flag, column) => (flag === 1 ? [column] : []));
              const own = tf.gather(
                stacked.slice([index, 0, 0, 0], [1, -1, -1, -1]),
                tf.tensor1d(columns, 'int32'),
                2,
              );
              return padColumns(own as tf.Tensor4D, longest);
            }),
            0,
          ) as tf.Tensor4D,
      );
    this.#replace(this.#keys.map(compact), this.#values.map(compact));
    for (const row of this.#rows) {
      row.valid = new Array<number>(longest).fill(0);
      row.valid.fill(1, 0, row.length);
    }
    this.#columns = longest;
  }

  #replace(keys: tf.Tensor4D[], values: tf.Tensor4D[]): void {
    for (const tensor of [...this.#keys, ...this.#values]) {
      if (!keys.includes(tensor) && !values.includes(tensor)) tensor.dispose();
    }
    this.#keys = keys;
    this.#values = values;
  }
}

function padColumns(tensor: tf.Tensor4D, columns: number): tf.Tensor4D {
  const missing = columns - tensor.shape[2];
  if (missing === 0) return tensor;
  return tf.pad(tensor, [
    [0, 0],
    [0, 0],
    [0, missing],
    [0, 0],
  ]);
}
