import * as tf from '@tensorflow/tfjs';

/** A product `[rows, inner] · [inner, columns]` of 2-D tensors. */
export type MatrixProduct = (input: tf.Tensor2D, weight: tf.Tensor2D) => tf.Tensor2D;

/** The plain product: what sampling and scoring use. */
export const plainProduct: MatrixProduct = (input, weight) => tf.matMul(input, weight);

/**
 * The same product, with gradients computed from explicitly transposed operands: `dX = dY · Wᵀ`
 * and `dW = Xᵀ · dY` as plain products. The autograd gradient asks for the transposed products
 * instead, which the wasm backend computes on a slow path (about 10× the plain product at
 * `[2831, 64] · [64, 256]`); a transpose is a copy, cheap next to either. The forward value is the
 * plain product's, bit for bit; gradients differ from autograd's only in float summation order.
 */
export const differentiableProduct: MatrixProduct = tf.customGrad(
  (...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [input, weight, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
    save([input, weight]);
    return {
      value: input.matMul(weight),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [savedInput, savedWeight] = saved as [tf.Tensor2D, tf.Tensor2D];
        return [
          tf.matMul(dy as tf.Tensor2D, savedWeight.transpose()),
          tf.matMul(savedInput.transpose(), dy as tf.Tensor2D),
        ];
      },
    };
  },
) as unknown as MatrixProduct;
