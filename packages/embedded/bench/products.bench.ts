// What the trainer's matrix-product gradients cost on the wasm backend: autograd's gradient of
// `X · W` asks for the transposed products `dY · Wᵀ` and `Xᵀ · dY`, which the backend computes on a
// slow path; differentiableProduct transposes explicitly and multiplies plainly. Measured at the
// weather recipe's shapes for one RL micro-batch (2,831 positions: d_model 64, feed-forward 256,
// 114 output classes), the two interleaved round by round so both see the same machine load; medians.
// The last output line is one JSON object of headline figures.
import * as tf from '@tensorflow/tfjs';
import { initializeBackend } from '../src/index.js';
import { differentiableProduct, type MatrixProduct, plainProduct } from '../src/internal.js';

await initializeBackend({ backend: 'wasm', log: (line) => console.log(line) });

const positions = 2831;
// [inner, columns] of every product of one layer's pass, and the output layer.
const shapes: [number, number][] = [
  [64, 64],
  [64, 64],
  [64, 64],
  [64, 64],
  [64, 256],
  [256, 64],
  [64, 114],
];
const arms = { autograd: plainProduct, explicit: differentiableProduct } as const;
type Arm = keyof typeof arms;

const operands = shapes.map(([inner, columns]) => ({
  input: tf.randomNormal([positions, inner], 0, 1, 'float32', 1) as tf.Tensor2D,
  weight: tf.randomNormal([inner, columns], 0, 1, 'float32', 2) as tf.Tensor2D,
  upstream: tf.randomNormal([positions, columns], 0, 1, 'float32', 3),
}));

function gradientSeconds(product: MatrixProduct): number {
  const started = performance.now();
  tf.tidy(() => {
    for (const { input, weight, upstream } of operands) {
      const gradients = tf.grads((x: tf.Tensor, w: tf.Tensor) =>
        product(x as tf.Tensor2D, w as tf.Tensor2D)
          .mul(upstream)
          .sum(),
      )([input, weight]);
      for (const gradient of gradients) gradient.dataSync();
    }
  });
  return (performance.now() - started) / 1000;
}

const times: Record<Arm, number[]> = { autograd: [], explicit: [] };
for (const arm of Object.keys(arms) as Arm[]) gradientSeconds(arms[arm]);
for (let round = 0; round < 12; round++) {
  for (const arm of Object.keys(arms) as Arm[]) times[arm].push(gradientSeconds(arms[arm]));
}
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const autograd = median(times.autograd);
const explicit = median(times.explicit);
console.log(
  `one layer's and the output layer's products, forward and gradients at ${positions} positions: ` +
    `autograd ${(autograd * 1000).toFixed(1)} ms, explicit transposes ${(explicit * 1000).toFixed(1)} ms`,
);
console.log(
  JSON.stringify({
    positions,
    autograd_ms: Number((autograd * 1000).toFixed(1)),
    explicit_transpose_ms: Number((explicit * 1000).toFixed(1)),
    speedup: Number((autograd / explicit).toFixed(2)),
  }),
);
