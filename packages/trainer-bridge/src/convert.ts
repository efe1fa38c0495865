import { type RoutedExperts, trajectoryIdOf } from '@dressage/multi-segment';
import { requireRoutedExpertsShape, zeroRoutedExperts } from '@dressage/multi-segment/internal';
import {
  DressageError,
  type PackedTrainBatch,
  packTrainBatch,
  type Sample,
  SampleStatus,
  sampleMetadata,
  type TrainBatch,
} from '@dressage/protocol';
import { describeSample, readRewardValue } from '@dressage/reward-registry';
import { type PostProcessedRewards, rewardPostProcess } from './reward-post-process.js';
import {
  type ResolvedTrainingOptions,
  resolveTrainingOptions,
  type TrainingOptions,
  usesPromptEqualDenominators,
} from './training-options.js';
import { checkMaxSequenceLength, truncateSample } from './truncate-sample.js';

/** Options of {@link convertSamplesToTrainData}. */
export interface ConvertOptions extends TrainingOptions {
  /**
   * Replaces the default reward post-processing (slime's `--custom-reward-post-process-path`):
   * given the samples and the resolved options, returns raw and post-processed rewards in order.
   */
  rewardPostProcess?: (samples: readonly Sample[], options: ResolvedTrainingOptions) => PostProcessedRewards;
  /**
   * slime's `--use-rollout-routing-replay` (R3): the batch carries every sample's routed experts; a
   * removed sample without them gets `len(tokens) − 1` zero rows of `numLayers × moeRouterTopk`.
   */
  useRolloutRoutingReplay?: boolean;
  /** slime's `--num-layers` (needed with `useRolloutRoutingReplay`). */
  numLayers?: number | null;
  /** slime's `--moe-router-topk` (needed with `useRolloutRoutingReplay`). */
  moeRouterTopk?: number | null;
  /**
   * The longest sequence the trainer takes: a longer sample is cut to its first
   * `maxSequenceLength` tokens with {@link truncateSample} (response, loss mask, logprobs, versions
   * and routed experts alike) and marked `truncated`. Nothing is padded: the batch carries every
   * sample's own length (slime pads per micro-batch). Unset or null: no limit.
   */
  maxSequenceLength?: number | null;
}

function invalid(message: string, details: Record<string, unknown> = {}): DressageError {
  return new DressageError({ code: 'invalid_argument', message, details });
}

function nonEmpty(value: unknown): value is string {
  return typeof value === 'string' && value !== '';
}

/**
 * Fills unset rollout ids with the smallest integers from 0 that no sample uses; each such sample
 * is a rollout of its own.
 */
export function assignRolloutIds(samples: readonly Pick<Sample, 'rollout_id'>[]): number[] {
  const used = new Set<number>();
  for (const sample of samples) if (sample.rollout_id !== null) used.add(sample.rollout_id);
  let next = 0;
  return samples.map((sample) => {
    if (sample.rollout_id !== null) return sample.rollout_id;
    while (used.has(next)) next += 1;
    used.add(next);
    return next;
  });
}

function filled(length: number, value: 0 | 1): (0 | 1)[] {
  return new Array<0 | 1>(length).fill(value);
}

// One pass over a mask: its trainable-token count. Values other than 0/1 are caught here, where the
// sample can still be named, instead of corrupting the packed batch.
function maskSum(mask: readonly number[], sample: Sample): number {
  let sum = 0;
  for (let i = 0; i < mask.length; i++) {
    const value = mask[i] as number;
    if (value === 1) sum += 1;
    else if (value !== 0) {
      throw invalid(`${describeSample(sample)}: loss_mask[${i}] is ${value}, expected 0 or 1`);
    }
  }
  return sum;
}

/**
 * Per-sample loss denominators.
 *
 * Prompt-equal (`grpo`, `reinforce_plus_plus_baseline`): `M_P × N / globalBatchSize`, where `M_P` is
 * the trainable-token total of the live samples of prompt P (`metadata.instance_id`) and `N` the
 * number of live prompts. If each sample's masked token sum is divided by its denominator and the
 * results are averaged over the global batch size, every live prompt contributes its token mean with
 * weight 1/N, whatever its segment count. A prompt is live when its live samples hold at least one
 * trainable token (a prompt with none has no token mean to contribute, and counting it would shrink
 * every other prompt's weight). Removed samples of a live prompt get its value; others get 0.
 *
 * Trajectory-equal (other estimators): the trainable-token total of the sample's rollout.
 */
export function computeRolloutMaskSums(
  samples: readonly Sample[],
  maskSums: readonly number[],
  rolloutIds: readonly number[],
  options: ResolvedTrainingOptions,
): number[] {
  if (!usesPromptEqualDenominators(options.advantageEstimator)) {
    const totals = new Map<number, number>();
    for (let i = 0; i < samples.length; i++) {
      const id = rolloutIds[i] as number;
      totals.set(id, (totals.get(id) ?? 0) + (maskSums[i] as number));
    }
    return rolloutIds.map((id) => totals.get(id) as number);
  }
  const globalBatchSize = options.globalBatchSize;
  if (globalBatchSize === null) {
    throw new DressageError({
      code: 'failed_precondition',
      message: `globalBatchSize is required for the prompt-equal denominators of "${options.advantageEstimator}"`,
    });
  }
  const promptTotals = new Map<string, number>();
  for (let i = 0; i < samples.length; i++) {
    const sample = samples[i] as Sample;
    const prompt = sampleMetadata.instanceId(sample);
    if (!nonEmpty(trajectoryIdOf(sample)) || prompt === null || prompt === '') {
      throw new DressageError({
        code: 'failed_precondition',
        message: `${describeSample(sample)} has no ${nonEmpty(trajectoryIdOf(sample)) ? 'metadata.instance_id' : 'metadata.parent_traj_id'}; prompt-equal training needs both (produce samples with expandSegmentsToSamples, or markAbortedNoGrad for failed ones)`,
        details: { sample_index: sample.index },
      });
    }
    if (sample.remove_sample) continue;
    if (sample.group_index === null) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `${describeSample(sample)} has no group_index; prompt-equal training groups live samples by prompt`,
        details: { sample_index: sample.index },
      });
    }
    promptTotals.set(prompt, (promptTotals.get(prompt) ?? 0) + (maskSums[i] as number));
  }
  let livePrompts = 0;
  for (const total of promptTotals.values()) if (total > 0) livePrompts += 1;
  const scale = livePrompts / globalBatchSize;
  return samples.map((sample) => {
    const total = promptTotals.get(sampleMetadata.instanceId(sample) ?? '') ?? 0;
    return total > 0 ? total * scale : 0;
  });
}

function perTokenArrays(
  samples: readonly Sample[],
  key: 'rollout_log_probs' | 'teacher_log_probs',
): number[][] | undefined {
  if (!samples.some((sample) => sample[key] !== null)) return undefined;
  return samples.map((sample) => {
    const values = sample[key];
    if (values === null) {
      // A placeholder without response tokens, or a removed sample, trains nothing: zeros are exact.
      if (sample.response_length === 0 || sample.remove_sample)
        return new Array<number>(sample.response_length).fill(0);
      throw invalid(`${describeSample(sample)} has no ${key} while other samples of the batch have them`);
    }
    if (values.length !== sample.response_length) {
      throw invalid(
        `${describeSample(sample)}: ${key} has ${values.length} entries but response_length is ${sample.response_length}`,
      );
    }
    return values;
  });
}

function isRoutedExperts(value: unknown): value is RoutedExperts {
  const routed = value as RoutedExperts | null;
  return (
    typeof routed === 'object' &&
    routed !== null &&
    routed.ids instanceof Int32Array &&
    Number.isInteger(routed.rows) &&
    routed.ids.length === routed.rows * routed.numLayers * routed.topk
  );
}

// R3 with replay on: each sample's routed experts, checked against its tokens and the model shape;
// removed samples without them train on zeros (their loss mask is zero anyway).
function replayRoutedExperts(samples: readonly Sample[], options: ConvertOptions): RoutedExperts[] {
  const shape = requireRoutedExpertsShape(options, 'useRolloutRoutingReplay');
  const { numLayers, moeRouterTopk } = shape;
  return samples.map((sample) => {
    const value = sample.rollout_routed_experts;
    const rows = sample.tokens.length - 1;
    if (value === null || value === undefined) {
      if (sample.remove_sample) return zeroRoutedExperts(rows, shape);
      throw invalid(
        `${describeSample(sample)} has no rollout_routed_experts but useRolloutRoutingReplay is on (expand its segments with useRolloutRoutingReplay, from a proxy started with --use-rollout-routing-replay)`,
        { field: 'rollout_routed_experts' },
      );
    }
    if (
      !isRoutedExperts(value) ||
      value.rows !== rows ||
      value.numLayers !== numLayers ||
      value.topk !== moeRouterTopk
    ) {
      const found = isRoutedExperts(value)
        ? `${value.rows} rows of ${value.numLayers} × ${value.topk}`
        : 'not decoded routed experts';
      throw invalid(
        `${describeSample(sample)}: rollout_routed_experts is ${found}, expected ${rows} rows (len(tokens) - 1) of ${numLayers} × ${moeRouterTopk}`,
        { field: 'rollout_routed_experts' },
      );
    }
    return value;
  });
}

/**
 * Converts a flat batch of samples into slime's `train_data` (the `--custom-convert-samples-to-train-data-path`
 * contract): rewards post-processed by {@link rewardPostProcess}, unset rollout ids filled, loss masks
 * (all ones when missing, all zeros for removed samples), `truncated`, and prompt-equal (`grpo`,
 * `reinforce_plus_plus_baseline`) or trajectory-equal `rollout_mask_sums` ({@link computeRolloutMaskSums}).
 * `raw_reward` takes `metadata.raw_reward` where a sample has it. With `useRolloutRoutingReplay`,
 * `rollout_routed_experts` holds every sample's routed experts (zero rows for removed samples
 * without them; a live sample without them is an error). With `maxSequenceLength`, longer samples
 * are cut to it first.
 *
 * Large per-token arrays (`tokens`, loss masks, logprobs) are shared with the samples, not copied:
 * pack the result (or use {@link convertSamplesToPackedTrainBatch}) before modifying either.
 */
export function convertSamplesToTrainData(
  input: readonly Sample[],
  options: ConvertOptions = {},
): TrainBatch {
  const maxLength = checkMaxSequenceLength(options.maxSequenceLength);
  const samples = maxLength === null ? input : input.map((sample) => truncateSample(sample, maxLength));
  const resolved = resolveTrainingOptions(options);
  const count = samples.length;
  const lossMasks: (0 | 1)[][] = new Array(count);
  const maskSums: number[] = new Array(count);
  for (let i = 0; i < count; i++) {
    const sample = samples[i] as Sample;
    if (sample.tokens.length === 0) throw invalid(`${describeSample(sample)} has no tokens`);
    const response = sample.response_length;
    if (!Number.isInteger(response) || response < 0 || response > sample.tokens.length) {
      throw invalid(
        `${describeSample(sample)}: response_length ${response} does not fit its ${sample.tokens.length} tokens`,
      );
    }
    let mask: (0 | 1)[];
    if (sample.remove_sample) mask = filled(response, 0);
    else if (sample.loss_mask === null) mask = filled(response, 1);
    else {
      if (sample.loss_mask.length !== response) {
        throw invalid(
          `${describeSample(sample)}: loss_mask has ${sample.loss_mask.length} entries but response_length is ${response}`,
        );
      }
      mask = sample.loss_mask;
    }
    lossMasks[i] = mask;
    maskSums[i] = sample.remove_sample ? 0 : sample.loss_mask === null ? response : maskSum(mask, sample);
  }

  const { rawRewards, rewards } = (options.rewardPostProcess ?? rewardPostProcess)(samples, resolved);
  if (
    samples.some((sample) => sample.metadata.raw_reward !== undefined && sample.metadata.raw_reward !== null)
  ) {
    for (let i = 0; i < count; i++) {
      const override = (samples[i] as Sample).metadata.raw_reward;
      if (override !== undefined && override !== null)
        rawRewards[i] = readRewardValue(override, resolved.rewardKey, () =>
          describeSample(samples[i] as Sample),
        );
    }
  }
  const rolloutIds = assignRolloutIds(samples);

  const batch: TrainBatch = {
    tokens: samples.map((sample) => sample.tokens),
    response_lengths: samples.map((sample) => sample.response_length),
    rewards,
    raw_reward: rawRewards,
    truncated: samples.map((sample) => (sample.status === SampleStatus.TRUNCATED ? 1 : 0)),
    sample_indices: samples.map((sample) => sample.index ?? -1),
    rollout_ids: rolloutIds,
    loss_masks: lossMasks,
    rollout_mask_sums: computeRolloutMaskSums(samples, maskSums, rolloutIds, resolved),
    source_names: samples.map((sample) =>
      typeof sample.metadata.source_name === 'string' ? sample.metadata.source_name : 'unknown',
    ),
  };
  const logprobs = perTokenArrays(samples, 'rollout_log_probs');
  if (logprobs !== undefined) batch.rollout_log_probs = logprobs;
  const teacher = perTokenArrays(samples, 'teacher_log_probs');
  if (teacher !== undefined) batch.teacher_log_probs = teacher;
  if (samples.some((sample) => sample.metadata.round_number !== undefined)) {
    batch.round_number = samples.map((sample) => {
      const round = sample.metadata.round_number;
      if (!Number.isInteger(round)) {
        throw invalid(
          `${describeSample(sample)}: metadata.round_number is ${JSON.stringify(round)}, but other samples have one`,
        );
      }
      return round as number;
    });
  }
  if (samples.some((sample) => sample.train_metadata !== null)) {
    batch.metadata = samples.map((sample) => sample.train_metadata ?? {});
  }
  if (samples.some((sample) => sample.multimodal_train_inputs !== null)) {
    batch.multimodal_train_inputs = samples.map((sample) => sample.multimodal_train_inputs);
  }
  if (options.useRolloutRoutingReplay === true) {
    batch.rollout_routed_experts = replayRoutedExperts(samples, options);
  } else if (
    samples.some(
      (sample) => sample.rollout_routed_experts !== null && sample.rollout_routed_experts !== undefined,
    )
  ) {
    batch.rollout_routed_experts = samples.map((sample) => sample.rollout_routed_experts ?? null);
  }
  return batch;
}

/**
 * {@link convertSamplesToTrainData} packed into typed arrays with `@dressage/protocol`'s
 * `packTrainBatch`, ready for `trainBatchToChunks`.
 */
export function convertSamplesToPackedTrainBatch(
  samples: readonly Sample[],
  options: ConvertOptions = {},
): PackedTrainBatch {
  return packTrainBatch(convertSamplesToTrainData(samples, options));
}
