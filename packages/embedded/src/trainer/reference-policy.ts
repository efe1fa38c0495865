import * as tf from '@tensorflow/tfjs';
import { CausalLanguageModel, type NamedWeights } from '../model.js';

/**
 * The KL loss's reference policy: a frozen copy of the policy's weights (slime's `--ref-load`, the
 * checkpoint the RL run starts from). Its logprobs are computed by a forward pass without gradients
 * on the same micro-batch as the policy's, with the same operations, so they equal the policy's own
 * bit for bit while the weights have not moved.
 */
export class ReferencePolicy {
  readonly #model: CausalLanguageModel;

  private constructor(model: CausalLanguageModel) {
    this.#model = model;
    // Never handed to an optimizer; marked so no implicit variable list picks it up either.
    for (const variable of model.parameters.values()) variable.trainable = false;
  }

  /** A frozen copy of `policy`'s current weights. */
  static capture(policy: CausalLanguageModel): ReferencePolicy {
    return ReferencePolicy.fromWeights(policy, policy.getWeights());
  }

  /**
   * A reference with stored weights (a checkpoint's), shaped like `policy`.
   * @throws DressageError `invalid_argument` when the weights do not fit the model.
   */
  static fromWeights(policy: CausalLanguageModel, weights: NamedWeights): ReferencePolicy {
    return new ReferencePolicy(CausalLanguageModel.fromWeights(policy.vocabulary, policy.config, weights));
  }

  /** A copy of the reference weights, bit-exact. */
  getWeights(): Map<string, Float32Array> {
    return this.#model.getWeights();
  }

  /**
   * Logprobs `[rows × length]` of the targets of a micro-batch (zero where `targetOneHot` has a
   * zero row), at `temperature`, as constants of the step.
   */
  logProbs(inputSlots: tf.Tensor2D, targetOneHot: tf.Tensor3D, temperature: number): Float32Array {
    // A gather for the embeddings: the same values as the training path's one-hot matmul, for less work.
    return tf.tidy(() => {
      const logits = this.#model.forward(inputSlots);
      const values = this.#model.targetLogprobs(logits, targetOneHot, temperature).dataSync();
      return (values as Float32Array).slice();
    });
  }

  /** Frees the weights. */
  dispose(): void {
    this.#model.dispose();
  }
}
