import { DressageError, type LossConfig, type PackedTrainBatch } from '@dressage/protocol';

/** slime's `--kl-loss-type` estimators of KL(current ‖ reference). */
export type KlLossType = 'k1' | 'k2' | 'k3' | 'low_var_kl';

/** The batch columns the policy loss reads. */
export type PolicyLossBatch = Pick<
  PackedTrainBatch,
  | 'sample_count'
  | 'response_lengths'
  | 'loss_masks'
  | 'rollout_log_probs'
  | 'rewards'
  | 'rollout_mask_sums'
  | 'rollout_ids'
>;

/** Policy-loss settings (slime's flags, same defaults). */
export interface PolicyLossOptions {
  /** PPO clip, lower side (`--eps-clip`). Default 0.2. */
  epsClip?: number;
  /** PPO clip, upper side (`--eps-clip-high`). Default: `epsClip`. */
  epsClipHigh?: number;
  /** Dual-clip constant for negative advantages (`--eps-clip-c`, > 1). Default off. */
  epsClipC?: number | null;
  /** Truncated importance sampling against the rollout logprobs (`--use-tis`). Default false. */
  useTis?: boolean;
  /** Upper TIS bound (`--tis-clip`). Default 2. */
  tisClip?: number;
  /** Lower TIS bound (`--tis-clip-low`). Default 0. */
  tisClipLow?: number;
  /** Adds `klLossCoef × KL(current ‖ reference)` (`--use-kl-loss`). Default false. */
  useKlLoss?: boolean;
  /** Default 0. */
  klLossCoef?: number;
  /** Default `k1`. */
  klLossType?: KlLossType;
  /** Subtracts `entropyCoef × entropy` (`--entropy-coef`). Default 0. */
  entropyCoef?: number;
  /** Per-token reducer instead of the per-rollout mean (`--calculate-per-token-loss`). Default false. */
  calculatePerTokenLoss?: boolean;
  /** The rollout logprobs are the old policy (`--use-rollout-logprobs`). Default false. */
  useRolloutLogProbs?: boolean;
  /**
   * Rollouts in the optimizer step this batch belongs to; the per-rollout mean divides by it.
   * Default: the number of distinct rollout ids in the batch (one step per batch).
   */
  globalBatchSize?: number | null;
  /**
   * Trainable tokens of the step; the per-token reducer divides by it (Megatron's normaliser).
   * Default: the trainable tokens of the batch.
   */
  tokenNormalizer?: number | null;
}

/** {@link PolicyLossOptions} with every default applied. */
export interface ResolvedPolicyLossOptions {
  epsClip: number;
  epsClipHigh: number;
  epsClipC: number | null;
  useTis: boolean;
  tisClip: number;
  tisClipLow: number;
  useKlLoss: boolean;
  klLossCoef: number;
  klLossType: KlLossType;
  entropyCoef: number;
  calculatePerTokenLoss: boolean;
  useRolloutLogProbs: boolean;
  globalBatchSize: number | null;
  tokenNormalizer: number | null;
}

const klTypes: ReadonlySet<string> = new Set(['k1', 'k2', 'k3', 'low_var_kl']);

function invalid(message: string, details: Record<string, unknown> = {}): DressageError {
  return new DressageError({ code: 'invalid_argument', message, details });
}

/**
 * Applies the defaults and checks every setting: finite numbers, non-negative clip ranges and
 * coefficients, and the combination (dual clip > 1, TIS needs rollout logprobs, …).
 * @throws DressageError `invalid_argument` naming the `loss.*` field.
 */
export function resolvePolicyLossOptions(options: PolicyLossOptions = {}): ResolvedPolicyLossOptions {
  const epsClip = options.epsClip ?? 0.2;
  const resolved: ResolvedPolicyLossOptions = {
    epsClip,
    epsClipHigh: options.epsClipHigh ?? epsClip,
    epsClipC: options.epsClipC ?? null,
    useTis: options.useTis ?? false,
    tisClip: options.tisClip ?? 2,
    tisClipLow: options.tisClipLow ?? 0,
    useKlLoss: options.useKlLoss ?? false,
    klLossCoef: options.klLossCoef ?? 0,
    klLossType: options.klLossType ?? 'k1',
    entropyCoef: options.entropyCoef ?? 0,
    calculatePerTokenLoss: options.calculatePerTokenLoss ?? false,
    useRolloutLogProbs: options.useRolloutLogProbs ?? false,
    globalBatchSize: options.globalBatchSize ?? null,
    tokenNormalizer: options.tokenNormalizer ?? null,
  };
  // Every number must be finite, and the clip ranges and coefficients non-negative: a negative
  // eps_clip would make the clip range empty, a NaN coefficient would make the loss NaN.
  const ranges: Array<[string, number | null, number]> = [
    ['eps_clip', resolved.epsClip, 0],
    ['eps_clip_high', resolved.epsClipHigh, 0],
    ['eps_clip_c', resolved.epsClipC, 0],
    ['tis_clip', resolved.tisClip, 0],
    ['tis_clip_low', resolved.tisClipLow, 0],
    ['kl_loss_coef', resolved.klLossCoef, 0],
    ['entropy_coef', resolved.entropyCoef, Number.NEGATIVE_INFINITY],
    ['token_normalizer', resolved.tokenNormalizer, 0],
  ];
  for (const [field, value, minimum] of ranges) {
    if (value !== null && !(Number.isFinite(value) && value >= minimum)) {
      throw invalid(`loss.${field} must be a finite number${minimum === 0 ? ' ≥ 0' : ''}, got ${value}`, {
        field: `loss.${field}`,
        value: String(value),
      });
    }
  }
  if (!klTypes.has(resolved.klLossType)) {
    throw invalid(`Unknown KL loss type "${resolved.klLossType}"; expected k1, k2, k3 or low_var_kl`);
  }
  if (resolved.epsClipC !== null && !(resolved.epsClipC > 1)) {
    throw invalid(`The dual-clip constant epsClipC must be greater than 1, got ${resolved.epsClipC}`);
  }
  if (resolved.useTis && resolved.useRolloutLogProbs) {
    throw invalid('useTis cannot be combined with useRolloutLogProbs: the TIS weight would always be 1');
  }
  if (resolved.tisClipLow > resolved.tisClip) {
    throw invalid(`tisClipLow (${resolved.tisClipLow}) is above tisClip (${resolved.tisClip})`);
  }
  const size = resolved.globalBatchSize;
  if (size !== null && !(size > 0 && Number.isSafeInteger(size))) {
    throw invalid(`globalBatchSize must be a positive integer, got ${size}`, { field: 'global_batch_size' });
  }
  return resolved;
}

/**
 * Policy-loss options from a Train call's `LossConfig` (unset fields keep the defaults) and the
 * header's `global_batch_size` (0 = unset).
 */
export function policyLossOptionsFromLossConfig(
  config: LossConfig | undefined,
  globalBatchSize = 0,
): PolicyLossOptions {
  const options: PolicyLossOptions = {};
  if (globalBatchSize > 0) options.globalBatchSize = globalBatchSize;
  if (config === undefined) return options;
  if (config.eps_clip !== undefined) options.epsClip = config.eps_clip;
  if (config.eps_clip_high !== undefined) options.epsClipHigh = config.eps_clip_high;
  if (config.eps_clip_c !== undefined) options.epsClipC = config.eps_clip_c;
  if (config.use_tis !== undefined) options.useTis = config.use_tis;
  if (config.tis_clip !== undefined) options.tisClip = config.tis_clip;
  if (config.tis_clip_low !== undefined) options.tisClipLow = config.tis_clip_low;
  if (config.use_kl_loss !== undefined) options.useKlLoss = config.use_kl_loss;
  if (config.kl_loss_coef !== undefined) options.klLossCoef = config.kl_loss_coef;
  if (config.kl_loss_type !== undefined) options.klLossType = config.kl_loss_type as KlLossType;
  if (config.entropy_coef !== undefined) options.entropyCoef = config.entropy_coef;
  if (config.calculate_per_token_loss !== undefined)
    options.calculatePerTokenLoss = config.calculate_per_token_loss;
  if (config.use_rollout_logprobs !== undefined) options.useRolloutLogProbs = config.use_rollout_logprobs;
  return options;
}

/** Response tokens of the batch (the length every per-token input must have). */
export function responseTokenCount(batch: PolicyLossBatch): number {
  let total = 0;
  for (let i = 0; i < batch.sample_count; i++) total += batch.response_lengths[i] as number;
  return total;
}

/** The step size the per-rollout mean divides by: the option, or the batch's distinct rollouts. */
export function effectiveGlobalBatchSize(batch: PolicyLossBatch, options: ResolvedPolicyLossOptions): number {
  return options.globalBatchSize ?? Math.max(1, new Set(batch.rollout_ids).size);
}

/**
 * Checks a sample's loss denominator. Exact division (never slime's `max(denominator, 1)`, which
 * breaks prompt-equal weighting when denominators fall below 1): a sample with trainable tokens needs
 * a positive, finite denominator; a sample without any contributes nothing whatever its value.
 */
export function checkDenominator(denominator: number, trainableTokens: number, sample: number): void {
  if (trainableTokens > 0 && !(denominator > 0 && Number.isFinite(denominator))) {
    throw invalid(
      `sample ${sample} has ${trainableTokens} trainable tokens but loss denominator ${denominator}; rollout_mask_sums must be positive where the loss mask is not all zero`,
      { sample, denominator, trainable_tokens: trainableTokens },
    );
  }
}

/** The metric names the policy loss reports (the optional ones only when their feature is on). */
export type PolicyLossMetricName =
  | 'loss'
  | 'pg_loss'
  | 'pg_clipfrac'
  | 'ppo_kl'
  | 'entropy_loss'
  | 'train_rollout_logprob_abs_diff'
  | 'kl_loss'
  | 'tis'
  | 'tis_clipfrac'
  | 'tis_abs'
  | 'ois';
