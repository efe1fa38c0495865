import { DressageError } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import type { CausalLanguageModel } from './model.js';

/** One training sequence of real token ids. */
export interface SupervisedExample {
  tokenIds: ArrayLike<number>;
  /**
   * Per token of `tokenIds`: 1 where the token is learned (predicted from the ones before it), 0
   * where it is context. Default: every token after the first.
   */
  lossMask?: ArrayLike<number>;
}

/** Options of {@link SupervisedTrainer}. */
export interface SupervisedTrainerOptions {
  /** Adam learning rate. Default 3e-3. */
  learningRate?: number;
  /** Clip the global gradient norm to this; 0 disables. Default 1. */
  maxGradientNorm?: number;
}

/** What one step did. */
export interface SupervisedStepResult {
  /** Mean cross-entropy over learned tokens, before the update. */
  loss: number;
  /** Learned tokens in the batch. */
  tokens: number;
  /** Global gradient norm before clipping. */
  gradientNorm: number;
}

/**
 * Next-token cross-entropy on masked tokens with Adam: the warm-start that gives RL a model which
 * sometimes succeeds. It trains the model's variables in place (through the differentiable
 * one-hot embedding path), so an engine sharing the model serves the new weights on its next step;
 * bump the weight version with `InferenceEngine.updateWeights` when that matters.
 */
export class SupervisedTrainer {
  readonly model: CausalLanguageModel;
  readonly #optimizer: tf.AdamOptimizer;
  readonly #maxGradientNorm: number;

  constructor(model: CausalLanguageModel, options: SupervisedTrainerOptions = {}) {
    this.model = model;
    this.#optimizer = tf.train.adam(options.learningRate ?? 3e-3);
    this.#maxGradientNorm = options.maxGradientNorm ?? 1;
  }

  /**
   * One Adam step on a batch.
   * @throws DressageError `invalid_argument` when no token is learned.
   */
  step(examples: readonly SupervisedExample[]): SupervisedStepResult {
    const batch = this.model.prepareBatch(examples.map((example) => example.tokenIds));
    const outputs = this.model.vocabulary.outputCount;
    // Targets and weights are plain data built before differentiation: a one-hot row per learned
    // token, zero rows elsewhere.
    const weights = new Float32Array(batch.batchSize * batch.length);
    examples.forEach((example, row) => {
      for (let position = 0; position + 1 < example.tokenIds.length; position++) {
        const learned = example.lossMask === undefined || example.lossMask[position + 1] !== 0;
        const target = batch.targetClasses[row * batch.length + position]!;
        if (learned && target >= 0) weights[row * batch.length + position] = 1;
      }
    });
    const tokens = weights.reduce((sum, value) => sum + value, 0);
    if (tokens === 0)
      throw new DressageError({ code: 'invalid_argument', message: 'The batch has no learned token' });
    const targetIndices = Int32Array.from(batch.targetClasses, (target, index) =>
      weights[index] ? target : 0,
    );
    const variables = [...this.model.parameters.values()];
    const { loss, gradientNorm } = tf.tidy(() => {
      const inputSlots = tf.tensor2d(batch.inputSlots, [batch.batchSize, batch.length], 'int32');
      const mask = tf.tensor2d(weights, [batch.batchSize, batch.length]);
      const targetOneHot = tf
        .oneHot(tf.tensor1d(targetIndices, 'int32'), outputs)
        .reshape([batch.batchSize, batch.length, outputs])
        .mul(mask.expandDims(-1)) as tf.Tensor3D;
      const { value, grads } = tf.variableGrads(() => {
        const logits = this.model.forward(inputSlots, { differentiable: true });
        const logprobs = this.model.targetLogprobs(logits, targetOneHot);
        return logprobs.sum().neg().div(tokens) as tf.Scalar;
      }, variables);
      const norm = tf.sqrt(tf.addN(Object.values(grads).map((gradient) => gradient.square().sum())));
      const gradientNorm = norm.dataSync()[0]!;
      const scale =
        this.#maxGradientNorm > 0 && gradientNorm > this.#maxGradientNorm
          ? this.#maxGradientNorm / gradientNorm
          : 1;
      const clipped: Array<{ name: string; tensor: tf.Tensor }> = Object.entries(grads).map(
        ([name, gradient]) => ({
          name,
          tensor: scale === 1 ? gradient : gradient.mul(scale),
        }),
      );
      this.#optimizer.applyGradients(clipped);
      return { loss: value.dataSync()[0]!, gradientNorm };
    });
    return { loss, tokens, gradientNorm };
  }

  /** Frees the optimizer state. */
  dispose(): void {
    this.#optimizer.dispose();
  }
}
