import type * as tf from '@tensorflow/tfjs';

// What the model and its decode batch share: a sequence's key/value cache, the tensors one stacked
// decode step passes between them, and the additive mask value that hides a key.

/** Added to the attention score of a key a query must not see. */
export const maskValue = -1e9;

/**
 * Key/value cache of one sequence: per layer, keys and values of every position read so far, each
 * `[heads, length, headDimension]`. Owned by the caller; free it with {@link disposeCache}.
 */
export interface SequenceCache {
  keys: tf.Tensor3D[];
  values: tf.Tensor3D[];
  /** Positions held. */
  length: number;
}

/** Frees every tensor of a cache. */
export function disposeCache(cache: SequenceCache): void {
  for (const tensor of cache.keys) tensor.dispose();
  for (const tensor of cache.values) tensor.dispose();
  cache.keys = [];
  cache.values = [];
  cache.length = 0;
}

/** What a {@link DecodeBatch} hands the model for one step (internal). */
export interface StackedStepInput {
  keys: ReadonlyArray<tf.Tensor4D | undefined>;
  values: ReadonlyArray<tf.Tensor4D | undefined>;
  columns: number;
  slots: number[];
  positions: number[];
  /**
   * Additive mask, the new column included: `[rows, columns + 1]`, or `[rows, heads, columns + 1]`
   * with ALiBi (each head its own distance bias).
   */
  mask: Float32Array;
}

/** What the model hands back to a {@link DecodeBatch} for one step (internal). */
export interface StackedStepOutput {
  logits: tf.Tensor2D;
  keys: tf.Tensor4D[];
  values: tf.Tensor4D[];
}
