import { DressageError } from '@dressage/protocol';
import {
  checkDenominator,
  effectiveGlobalBatchSize,
  type KlLossType,
  type PolicyLossBatch,
  type PolicyLossMetricName,
  type PolicyLossOptions,
  resolvePolicyLossOptions,
  responseTokenCount,
} from './policy-loss-options.js';

/** Per-token inputs of {@link policyLossReference}, each over the batch's response tokens in order. */
export interface PolicyLossReferenceInputs {
  /** Current policy's logprob of each response token. */
  logProbs: ArrayLike<number>;
  /** Old policy's logprobs. Default: the rollout logprobs with `useRolloutLogProbs`, else `logProbs`. */
  oldLogProbs?: ArrayLike<number>;
  /** Per-token entropy of the current policy. Default zeros. */
  entropy?: ArrayLike<number>;
  /** Reference policy's logprobs; required with `useKlLoss`. */
  refLogProbs?: ArrayLike<number>;
  /** Per-token advantages. Default: each sample's `rewards` entry broadcast over its response. */
  advantages?: ArrayLike<number>;
}

/** The loss and its metrics, as plain numbers. */
export interface PolicyLossValues {
  loss: number;
  metrics: Partial<Record<PolicyLossMetricName, number>>;
}

/** slime's approximate KL estimators, in float64. */
export function approximateKl(logProb: number, refLogProb: number, type: KlLossType): number {
  const logRatio = logProb - refLogProb;
  if (type === 'k1') return logRatio;
  if (type === 'k2') return (logRatio * logRatio) / 2;
  const kl = Math.exp(-logRatio) - 1 + logRatio;
  return type === 'low_var_kl' ? Math.min(10, Math.max(-10, kl)) : kl;
}

function need(values: ArrayLike<number> | undefined, length: number, name: string): ArrayLike<number> {
  if (values === undefined) {
    throw new DressageError({ code: 'invalid_argument', message: `the policy loss needs ${name}` });
  }
  if (values.length !== length) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${name} has ${values.length} entries but the batch has ${length} response tokens`,
    });
  }
  return values;
}

/**
 * The policy loss in float64, written as plainly as possible: the reference the tfjs loss is tested
 * against, and a CPU fallback for small batches. Same semantics as {@link policyLoss}.
 */
export function policyLossReference(
  inputs: PolicyLossReferenceInputs,
  batch: PolicyLossBatch,
  options: PolicyLossOptions = {},
): PolicyLossValues {
  const o = resolvePolicyLossOptions(options);
  const n = responseTokenCount(batch);
  const logProbs = need(inputs.logProbs, n, 'logProbs');
  const rollout = batch.rollout_log_probs;
  if ((o.useTis || o.useRolloutLogProbs) && rollout === null) {
    throw new DressageError({
      code: 'invalid_argument',
      message: 'useTis and useRolloutLogProbs need the batch rollout_log_probs',
    });
  }
  const old = o.useRolloutLogProbs
    ? (rollout as Float32Array)
    : inputs.oldLogProbs === undefined
      ? logProbs
      : need(inputs.oldLogProbs, n, 'oldLogProbs');
  const entropy = inputs.entropy === undefined ? null : need(inputs.entropy, n, 'entropy');
  const ref = o.useKlLoss ? need(inputs.refLogProbs, n, 'refLogProbs') : null;
  const advantages = inputs.advantages === undefined ? null : need(inputs.advantages, n, 'advantages');

  const terms: Record<string, number[]> = {};
  const names: PolicyLossMetricName[] = ['pg_loss', 'pg_clipfrac', 'ppo_kl', 'entropy_loss'];
  if (rollout !== null) names.push('train_rollout_logprob_abs_diff');
  if (o.useKlLoss) names.push('kl_loss');
  if (o.useTis) names.push('tis', 'tis_clipfrac', 'tis_abs', 'ois');
  for (const name of names) terms[name] = new Array<number>(n).fill(0);

  let offset = 0;
  for (let i = 0; i < batch.sample_count; i++) {
    const length = batch.response_lengths[i] as number;
    for (let t = offset; t < offset + length; t++) {
      const advantage = advantages === null ? (batch.rewards[i] as number) : (advantages[t] as number);
      const logProb = logProbs[t] as number;
      const ppoKl = (old[t] as number) - logProb;
      const ratio = Math.exp(-ppoKl);
      const loss1 = -ratio * advantage;
      const loss2 = -Math.min(1 + o.epsClipHigh, Math.max(1 - o.epsClip, ratio)) * advantage;
      let pg = Math.max(loss1, loss2);
      if (o.epsClipC !== null && advantage < 0) pg = Math.min(-o.epsClipC * advantage, pg);
      if (o.useTis) {
        const raw = Math.exp((old[t] as number) - ((rollout as Float32Array)[t] as number));
        const weight = Math.min(o.tisClip, Math.max(o.tisClipLow, raw));
        pg *= weight;
        (terms.tis as number[])[t] = raw;
        (terms.tis_clipfrac as number[])[t] = weight !== raw ? 1 : 0;
        (terms.tis_abs as number[])[t] = Math.abs(raw - 1);
        (terms.ois as number[])[t] = ratio;
      }
      (terms.pg_loss as number[])[t] = pg;
      (terms.pg_clipfrac as number[])[t] = loss2 > loss1 ? 1 : 0;
      (terms.ppo_kl as number[])[t] = ppoKl;
      (terms.entropy_loss as number[])[t] = entropy === null ? 0 : (entropy[t] as number);
      if (rollout !== null) {
        (terms.train_rollout_logprob_abs_diff as number[])[t] = Math.abs(
          (old[t] as number) - (rollout[t] as number),
        );
      }
      if (ref !== null)
        (terms.kl_loss as number[])[t] = approximateKl(logProb, ref[t] as number, o.klLossType);
    }
    offset += length;
  }

  const reduce = referenceReducer(
    batch,
    o.calculatePerTokenLoss,
    o.tokenNormalizer,
    effectiveGlobalBatchSize(batch, o),
  );
  const metrics: Partial<Record<PolicyLossMetricName, number>> = {};
  for (const name of names) metrics[name] = reduce(terms[name] as number[]);
  const loss =
    (metrics.pg_loss as number) -
    o.entropyCoef * (metrics.entropy_loss as number) +
    (o.useKlLoss ? o.klLossCoef * (metrics.kl_loss as number) : 0);
  metrics.loss = loss;
  return { loss, metrics };
}

/**
 * slime's two reducers over per-token values, in float64. Per-rollout mean: `Σ_i (Σ_t x·mask) / d_i`
 * over samples, divided by the step's rollout count, with `d_i` the exact `rollout_mask_sums` entry.
 * Per-token: `Σ x·mask` divided by the step's trainable tokens.
 */
export function referenceReducer(
  batch: PolicyLossBatch,
  perToken: boolean,
  tokenNormalizer: number | null,
  globalBatchSize: number,
): (values: ArrayLike<number>) => number {
  let trainable = 0;
  for (let j = 0; j < batch.loss_masks.length; j++) trainable += batch.loss_masks[j] as number;
  return (values) => {
    let total = 0;
    let offset = 0;
    for (let i = 0; i < batch.sample_count; i++) {
      const length = batch.response_lengths[i] as number;
      let sum = 0;
      let count = 0;
      for (let t = offset; t < offset + length; t++) {
        if (batch.loss_masks[t] === 1) {
          sum += values[t] as number;
          count += 1;
        }
      }
      offset += length;
      if (perToken) total += sum;
      else {
        const denominator = batch.rollout_mask_sums[i] as number;
        checkDenominator(denominator, count, i);
        if (count > 0) total += sum / denominator;
      }
    }
    if (perToken) {
      const normalizer = tokenNormalizer ?? trainable;
      return normalizer > 0 ? total / normalizer : 0;
    }
    return total / globalBatchSize;
  };
}
