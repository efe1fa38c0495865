import { DressageError } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import {
  checkDenominator,
  effectiveGlobalBatchSize,
  type PolicyLossBatch,
  type PolicyLossMetricName,
  type PolicyLossOptions,
  type ResolvedPolicyLossOptions,
  resolvePolicyLossOptions,
  responseTokenCount,
} from './policy-loss-options.js';

/** A per-token input: a tensor (on the tape when it depends on trainable weights) or constant data. */
export type PerTokenInput = tf.Tensor1D | Float32Array;

/**
 * Per-token inputs of {@link policyLoss}, each of length `Σ response_lengths`, samples in batch order
 * (the layout of the packed batch's `loss_masks` and `rollout_log_probs`).
 */
export interface PolicyLossInputs {
  /** Current policy's logprob of each response token: the tensor gradients flow through. */
  logProbs: tf.Tensor1D;
  /**
   * Old policy's logprobs (recomputed before the step). Default: the rollout logprobs with
   * `useRolloutLogProbs`, else the current logprobs with gradients stopped (slime's reuse when a
   * rollout trains in a single step).
   */
  oldLogProbs?: PerTokenInput;
  /** Per-token entropy of the current policy (for the entropy bonus and its metric). */
  entropy?: tf.Tensor1D;
  /** Reference policy's logprobs; required with `useKlLoss`. */
  refLogProbs?: PerTokenInput;
  /** Per-token advantages. Default: each sample's `rewards` entry (GRPO) broadcast over its response. */
  advantages?: Float32Array;
}

/** The loss and its metrics as scalar tensors (the caller owns and disposes them). */
export interface PolicyLossTensors {
  loss: tf.Scalar;
  metrics: Partial<Record<PolicyLossMetricName, tf.Scalar>>;
}

// Identity forward, zero gradient: the old policy is a constant of the step.
const stopGradient = tf.customGrad((...inputs: (tf.Tensor | tf.GradSaveFunc)[]) => {
  const x = inputs[0] as tf.Tensor;
  return { value: tf.clone(x), gradFunc: (dy: tf.Tensor | tf.Tensor[]) => tf.zerosLike(dy as tf.Tensor) };
});

function invalid(message: string): DressageError {
  return new DressageError({ code: 'invalid_argument', message });
}

function asTensor(input: PerTokenInput, length: number, name: string): tf.Tensor1D {
  const size = input instanceof Float32Array ? input.length : input.shape[0];
  if (size !== length)
    throw invalid(`${name} has ${size} entries but the batch has ${length} response tokens`);
  return input instanceof Float32Array ? tf.tensor1d(input, 'float32') : input;
}

/**
 * The per-token weights of a reducer, computed once in float64: the loss is then `Σ x·w`.
 * Per-rollout mean: `w = mask / d_i / globalBatchSize` with the exact denominator `d_i`.
 * Per-token: `w = mask / tokenNormalizer`.
 */
export function reducerWeights(batch: PolicyLossBatch, options: ResolvedPolicyLossOptions): Float32Array {
  const n = responseTokenCount(batch);
  const weights = new Float32Array(n);
  if (options.calculatePerTokenLoss) {
    let trainable = 0;
    for (let j = 0; j < n; j++) trainable += batch.loss_masks[j] as number;
    const normalizer = options.tokenNormalizer ?? trainable;
    if (normalizer > 0) for (let j = 0; j < n; j++) weights[j] = (batch.loss_masks[j] as number) / normalizer;
    return weights;
  }
  const steps = effectiveGlobalBatchSize(batch, options);
  let offset = 0;
  for (let i = 0; i < batch.sample_count; i++) {
    const length = batch.response_lengths[i] as number;
    let count = 0;
    for (let t = offset; t < offset + length; t++) count += batch.loss_masks[t] as number;
    const denominator = batch.rollout_mask_sums[i] as number;
    checkDenominator(denominator, count, i);
    if (count > 0) {
      const scale = 1 / denominator / steps;
      for (let t = offset; t < offset + length; t++) weights[t] = (batch.loss_masks[t] as number) * scale;
    }
    offset += length;
  }
  return weights;
}

/** Each sample's reward broadcast over its response tokens (GRPO-family advantages). */
export function broadcastRewards(batch: PolicyLossBatch): Float32Array {
  const out = new Float32Array(responseTokenCount(batch));
  let offset = 0;
  for (let i = 0; i < batch.sample_count; i++) {
    const length = batch.response_lengths[i] as number;
    out.fill(batch.rewards[i] as number, offset, offset + length);
    offset += length;
  }
  return out;
}

/**
 * slime's policy loss on tfjs tensors over a packed batch: PPO clip (`epsClip`, `epsClipHigh`, dual
 * clip `epsClipC`), truncated importance sampling against the rollout logprobs, KL loss (k1, k2, k3,
 * low_var_kl), entropy bonus, reduced per rollout (exact `rollout_mask_sums` denominators) or per
 * token. `loss = pg_loss − entropyCoef·entropy_loss + klLossCoef·kl_loss`. Call it inside
 * `tf.variableGrads` / `optimizer.minimize` (or use {@link policyLossGradients}).
 */
export function policyLoss(
  inputs: PolicyLossInputs,
  batch: PolicyLossBatch,
  options: PolicyLossOptions = {},
): PolicyLossTensors {
  const o = resolvePolicyLossOptions(options);
  const n = responseTokenCount(batch);
  if (inputs.logProbs.shape[0] !== n) {
    throw invalid(`logProbs has ${inputs.logProbs.shape[0]} entries but the batch has ${n} response tokens`);
  }
  const rollout = batch.rollout_log_probs;
  if ((o.useTis || o.useRolloutLogProbs) && rollout === null) {
    throw invalid('useTis and useRolloutLogProbs need the batch rollout_log_probs');
  }
  if (o.useKlLoss && inputs.refLogProbs === undefined) throw invalid('useKlLoss needs refLogProbs');
  const advantageValues = inputs.advantages ?? broadcastRewards(batch);
  if (advantageValues.length !== n) {
    throw invalid(`advantages has ${advantageValues.length} entries but the batch has ${n} response tokens`);
  }
  const weightValues = reducerWeights(batch, o);
  let negativeValues: Uint8Array | null = null;
  if (o.epsClipC !== null) {
    negativeValues = new Uint8Array(n);
    for (let t = 0; t < n; t++) negativeValues[t] = (advantageValues[t] as number) < 0 ? 1 : 0;
  }

  return tf.tidy(() => {
    const logProbs = inputs.logProbs;
    const weights = tf.tensor1d(weightValues, 'float32');
    const reduce = (values: tf.Tensor): tf.Scalar => tf.sum(tf.mul(values, weights));
    const advantages = tf.tensor1d(advantageValues, 'float32');
    const rolloutTensor = rollout === null ? null : tf.tensor1d(rollout, 'float32');
    const old =
      o.useRolloutLogProbs && rolloutTensor !== null
        ? rolloutTensor
        : inputs.oldLogProbs !== undefined
          ? asTensor(inputs.oldLogProbs, n, 'oldLogProbs')
          : (stopGradient(logProbs) as tf.Tensor1D);

    const ppoKl = tf.sub(old, logProbs);
    const ratio = tf.exp(tf.neg(ppoKl));
    const loss1 = tf.neg(tf.mul(ratio, advantages));
    const loss2 = tf.neg(tf.mul(tf.clipByValue(ratio, 1 - o.epsClip, 1 + o.epsClipHigh), advantages));
    let pg: tf.Tensor = tf.maximum(loss1, loss2);
    const metrics: Partial<Record<PolicyLossMetricName, tf.Scalar>> = {
      pg_clipfrac: reduce(tf.cast(tf.greater(loss2, loss1), 'float32')),
      ppo_kl: reduce(ppoKl),
    };
    if (negativeValues !== null) {
      const negative = tf.tensor1d(negativeValues, 'bool');
      pg = tf.where(negative, tf.minimum(tf.mul(advantages, -(o.epsClipC as number)), pg), pg);
    }
    if (o.useTis && rolloutTensor !== null) {
      const raw = tf.exp(tf.sub(old, rolloutTensor));
      const weight = tf.clipByValue(raw, o.tisClipLow, o.tisClip);
      pg = tf.mul(pg, weight);
      metrics.tis = reduce(raw);
      metrics.tis_clipfrac = reduce(tf.cast(tf.notEqual(weight, raw), 'float32'));
      metrics.tis_abs = reduce(tf.abs(tf.sub(raw, 1)));
      metrics.ois = reduce(ratio);
    }
    if (rolloutTensor !== null)
      metrics.train_rollout_logprob_abs_diff = reduce(tf.abs(tf.sub(old, rolloutTensor)));
    const pgLoss = reduce(pg);
    metrics.pg_loss = pgLoss;
    const entropyLoss =
      inputs.entropy === undefined ? tf.scalar(0) : reduce(asTensor(inputs.entropy, n, 'entropy'));
    metrics.entropy_loss = entropyLoss;
    let loss: tf.Scalar = tf.sub(pgLoss, tf.mul(entropyLoss, o.entropyCoef));
    if (o.useKlLoss) {
      const logRatio = tf.sub(logProbs, asTensor(inputs.refLogProbs as PerTokenInput, n, 'refLogProbs'));
      let kl: tf.Tensor;
      if (o.klLossType === 'k1') kl = logRatio;
      else if (o.klLossType === 'k2') kl = tf.div(tf.square(logRatio), 2);
      else kl = tf.add(tf.sub(tf.exp(tf.neg(logRatio)), 1), logRatio);
      if (o.klLossType === 'low_var_kl') kl = tf.clipByValue(kl, -10, 10);
      const klLoss = reduce(kl);
      metrics.kl_loss = klLoss;
      loss = tf.add(loss, tf.mul(klLoss, o.klLossCoef));
    }
    metrics.loss = loss;
    return { loss, metrics };
  });
}

/** What {@link policyLossGradients} returns. */
export interface PolicyLossGradients {
  loss: number;
  metrics: Partial<Record<PolicyLossMetricName, number>>;
  /** Gradient of the loss for each trainable variable, by name. The caller disposes them. */
  gradients: tf.NamedTensorMap;
}

/**
 * One backward pass: runs `computeInputs` (the forward pass producing the current logprobs, and
 * optionally entropy) under the gradient tape, applies {@link policyLoss}, and returns the gradients
 * with the loss and metrics read back as numbers. Apply them with `optimizer.applyGradients`.
 */
export function policyLossGradients(
  computeInputs: () => PolicyLossInputs,
  batch: PolicyLossBatch,
  options: PolicyLossOptions = {},
  variables?: tf.Variable[],
): PolicyLossGradients {
  let kept: Partial<Record<PolicyLossMetricName, tf.Scalar>> = {};
  const { value, grads } = tf.variableGrads(() => {
    const result = policyLoss(computeInputs(), batch, options);
    kept = {};
    for (const [name, metric] of Object.entries(result.metrics)) {
      // The loss is returned to the tape; everything else would be disposed with its scope.
      kept[name as PolicyLossMetricName] = metric === result.loss ? metric : tf.keep(metric);
    }
    return result.loss;
  }, variables);
  const metrics: Partial<Record<PolicyLossMetricName, number>> = {};
  for (const [name, metric] of Object.entries(kept)) {
    if (metric === undefined) continue;
    metrics[name as PolicyLossMetricName] = (metric.dataSync()[0] as number) ?? 0;
    if (name !== 'loss') metric.dispose();
  }
  const loss = value.dataSync()[0] as number;
  metrics.loss = loss;
  value.dispose();
  return { loss, metrics, gradients: grads };
}

/**
 * Scales gradients so their global L2 norm is at most `maxNorm` (slime's `--clip-grad`, default 1).
 * Returns new tensors (the inputs are disposed) and the norm before clipping.
 */
export function clipGradientsByGlobalNorm(
  gradients: tf.NamedTensorMap,
  maxNorm = 1,
): { gradients: tf.NamedTensorMap; norm: number } {
  const entries = Object.entries(gradients);
  const norm = tf.tidy(() => {
    if (entries.length === 0) return 0;
    const squares = entries.map(([, gradient]) => tf.sum(tf.square(gradient)));
    return Math.sqrt(tf.addN(squares).dataSync()[0] as number);
  });
  const scale = norm > maxNorm ? maxNorm / (norm + 1e-6) : 1;
  const clipped: tf.NamedTensorMap = {};
  for (const [name, gradient] of entries) {
    clipped[name] = scale === 1 ? gradient : tf.tidy(() => tf.mul(gradient, scale));
    if (scale !== 1) gradient.dispose();
  }
  return { gradients: clipped, norm };
}
