import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initializeBackend } from './backend.js';
import { differentiableProduct, plainProduct } from './linear.js';

function randomMatrix(rows: number, columns: number, seed: number): tf.Tensor2D {
  return tf.randomNormal([rows, columns], 0, 1, 'float32', seed) as tf.Tensor2D;
}

function maxRelativeError(actual: Float32Array, expected: Float32Array): number {
  let worst = 0;
  for (let index = 0; index < expected.length; index++) {
    const scale = Math.max(1, Math.abs(expected[index]!));
    worst = Math.max(worst, Math.abs(actual[index]! - expected[index]!) / scale);
  }
  return worst;
}

describe('differentiableProduct', () => {
  beforeAll(async () => {
    await initializeBackend({ backend: 'wasm' });
  });

  it('computes the plain product bit for bit', () => {
    const input = randomMatrix(300, 64, 1);
    const weight = randomMatrix(64, 256, 2);
    const plain = plainProduct(input, weight).dataSync();
    const differentiable = differentiableProduct(input, weight).dataSync();
    expect(Buffer.from(differentiable.buffer).equals(Buffer.from(plain.buffer))).toBe(true);
  });

  it('has the gradients of the plain product, to float rounding', () => {
    const input = randomMatrix(300, 64, 3);
    const weight = randomMatrix(64, 256, 4);
    const upstream = randomMatrix(300, 256, 5);
    const loss = (product: typeof plainProduct) => (x: tf.Tensor, w: tf.Tensor) =>
      product(x as tf.Tensor2D, w as tf.Tensor2D)
        .mul(upstream)
        .sum();
    const expected = tf.grads(loss(plainProduct))([input, weight]);
    const actual = tf.grads(loss(differentiableProduct))([input, weight]);
    for (const [index, gradient] of actual.entries()) {
      expect(gradient.shape).toEqual(expected[index]!.shape);
      const error = maxRelativeError(
        gradient.dataSync() as Float32Array,
        expected[index]!.dataSync() as Float32Array,
      );
      // Sums of 300 products in a different order: float32 rounding, far below a real error.
      expect(error).toBeLessThan(1e-4);
    }
    // The weight gradient is Xᵀ·dY: check one entry against its definition.
    const x = input.arraySync();
    const dy = upstream.arraySync();
    let entry = 0;
    for (let row = 0; row < 300; row++) entry += x[row]![5]! * dy[row]![7]!;
    expect((actual[1] as tf.Tensor2D).arraySync()[5]![7]).toBeCloseTo(entry, 3);
  });

  it('trains variables through tf.variableGrads', () => {
    const weight = tf.variable(randomMatrix(8, 4, 6));
    const input = randomMatrix(16, 8, 7);
    const { grads } = tf.variableGrads(
      () => differentiableProduct(input, weight).square().sum() as tf.Scalar,
      [weight],
    );
    const expected = tf.grad((w: tf.Tensor) =>
      plainProduct(input, w as tf.Tensor2D)
        .square()
        .sum(),
    )(weight);
    const error = maxRelativeError(
      grads[weight.name]!.dataSync() as Float32Array,
      expected.dataSync() as Float32Array,
    );
    expect(error).toBeLessThan(1e-5);
  });
});
