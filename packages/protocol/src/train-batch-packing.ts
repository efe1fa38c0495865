// A TrainBatch in typed arrays, and back.
import { DressageError } from './errors.js';
import type { TrainBatch } from './schemas/train-batch.js';

/**
 * A TrainBatch in typed arrays: per-sample arrays have `sample_count` entries, per-token arrays
 * concatenate the samples in order (`tokens` over all tokens, the others over response tokens).
 */
export interface PackedTrainBatch {
  sample_count: number;
  tokens: Int32Array;
  total_lengths: Int32Array;
  response_lengths: Int32Array;
  loss_masks: Uint8Array;
  rollout_log_probs: Float32Array | null;
  teacher_log_probs: Float32Array | null;
  rollout_ids: Int32Array;
  rewards: Float32Array;
  raw_rewards: Float32Array;
  rollout_mask_sums: Float64Array;
  truncated: Uint8Array;
  sample_indices: Int32Array;
  /** Routed experts of every sample (MoE routing replay), when the batch carries them. */
  routed_experts?: PackedRoutedExperts | null;
}

/** The width routed expert ids travel in: the one the inference engine recorded them in. */
export type RoutedExpertsDtype = 'uint8' | 'uint16' | 'int32';

/**
 * Routed experts of a packed batch: for every sample, `len(tokens) − 1` rows of `num_layers × topk`
 * expert ids, row-major, concatenated in sample order.
 */
export interface PackedRoutedExperts {
  dtype: RoutedExpertsDtype;
  num_layers: number;
  topk: number;
  ids: Uint8Array | Uint16Array | Int32Array;
}

/** The element types routed-expert ids travel in, narrowest first. */
export const routedDtypes: readonly RoutedExpertsDtype[] = ['uint8', 'uint16', 'int32'];
const routedLimits: Record<RoutedExpertsDtype, number> = { uint8: 0xff, uint16: 0xffff, int32: 0x7fffffff };

interface RoutedExpertsValue {
  rows: number;
  numLayers: number;
  topk: number;
  ids: Int32Array;
  dtype?: RoutedExpertsDtype;
}

function isRoutedExpertsValue(value: unknown): value is RoutedExpertsValue {
  const routed = value as RoutedExpertsValue | null;
  return (
    typeof routed === 'object' &&
    routed !== null &&
    routed.ids instanceof Int32Array &&
    Number.isInteger(routed.rows) &&
    Number.isInteger(routed.numLayers) &&
    Number.isInteger(routed.topk) &&
    routed.numLayers > 0 &&
    routed.topk > 0 &&
    routed.ids.length === routed.rows * routed.numLayers * routed.topk
  );
}

// Packs `rollout_routed_experts` (one decoded RoutedExperts per sample) in the widest dtype any
// sample was recorded in, checking each sample's rows (len(tokens) − 1) and one shape for all.
function packRoutedExperts(batch: TrainBatch): PackedRoutedExperts | null {
  const values = batch.rollout_routed_experts;
  if (values === undefined) return null;
  let layout: { numLayers: number; topk: number } | null = null;
  let dtype: RoutedExpertsDtype = 'uint8';
  let total = 0;
  values.forEach((value, i) => {
    const field = `rollout_routed_experts[${i}]`;
    if (!isRoutedExpertsValue(value)) {
      throw invalid(`train batch: ${field} is not decoded routed experts (rows, numLayers, topk, ids)`, {
        field,
      });
    }
    const rows = (batch.tokens[i] as number[]).length - 1;
    if (value.rows !== rows) {
      throw invalid(
        `train batch: ${field} has ${value.rows} rows but sample ${i} needs ${rows} (len(tokens) - 1)`,
        {
          field,
        },
      );
    }
    layout ??= { numLayers: value.numLayers, topk: value.topk };
    if (value.numLayers !== layout.numLayers || value.topk !== layout.topk) {
      throw invalid(
        `train batch: ${field} is ${value.numLayers} × ${value.topk} but sample 0 is ${layout.numLayers} × ${layout.topk}`,
        { field },
      );
    }
    const recorded = value.dtype ?? 'int32';
    if (routedDtypes.indexOf(recorded) > routedDtypes.indexOf(dtype)) dtype = recorded;
    total += value.ids.length;
  });
  if (layout === null) return null;
  const { numLayers, topk } = layout as { numLayers: number; topk: number };
  const ids =
    dtype === 'uint8'
      ? new Uint8Array(total)
      : dtype === 'uint16'
        ? new Uint16Array(total)
        : new Int32Array(total);
  let offset = 0;
  values.forEach((value, i) => {
    const source = (value as RoutedExpertsValue).ids;
    for (let j = 0; j < source.length; j++) {
      const id = source[j] as number;
      if (id < 0 || id > routedLimits[dtype]) {
        throw invalid(`train batch: rollout_routed_experts[${i}] holds expert id ${id}, outside ${dtype}`, {
          field: `rollout_routed_experts[${i}]`,
        });
      }
    }
    ids.set(source, offset);
    offset += source.length;
  });
  return { dtype, num_layers: numLayers, topk, ids };
}

/** An `invalid_argument` error about a train batch. */
export function invalid(message: string, details: Record<string, unknown> = {}): DressageError {
  return new DressageError({ code: 'invalid_argument', message, details });
}

function sampleArray(batch: TrainBatch, key: keyof TrainBatch, count: number): void {
  const values = batch[key] as unknown[] | undefined;
  if (values !== undefined && values.length !== count) {
    throw invalid(`train batch: ${String(key)} has ${values.length} entries but tokens has ${count}`, {
      field: key,
    });
  }
}

/**
 * Packs slime's `train_data` dict into typed arrays, checking every length invariant on the way
 * (response tails fit their samples, masks and logprobs cover exactly the response tokens).
 */
export function packTrainBatch(batch: TrainBatch): PackedTrainBatch {
  const count = batch.tokens.length;
  for (const key of [
    'response_lengths',
    'rewards',
    'raw_reward',
    'truncated',
    'sample_indices',
    'rollout_ids',
    'loss_masks',
    'rollout_mask_sums',
    'rollout_log_probs',
    'teacher_log_probs',
  ] as const) {
    sampleArray(batch, key, count);
  }
  let tokenTotal = 0;
  let responseTotal = 0;
  for (let i = 0; i < count; i++) {
    const length = (batch.tokens[i] as number[]).length;
    const response = batch.response_lengths[i] as number;
    if (!Number.isInteger(response) || response < 0 || response > length) {
      throw invalid(
        `train batch: response_lengths[${i}] = ${response} does not fit sample ${i} of ${length} tokens`,
        {
          field: `response_lengths[${i}]`,
        },
      );
    }
    tokenTotal += length;
    responseTotal += response;
  }
  const packed: PackedTrainBatch = {
    sample_count: count,
    tokens: new Int32Array(tokenTotal),
    total_lengths: new Int32Array(count),
    response_lengths: Int32Array.from(batch.response_lengths),
    loss_masks: new Uint8Array(responseTotal),
    rollout_log_probs: batch.rollout_log_probs ? new Float32Array(responseTotal) : null,
    teacher_log_probs: batch.teacher_log_probs ? new Float32Array(responseTotal) : null,
    rollout_ids: Int32Array.from(batch.rollout_ids),
    rewards: Float32Array.from(batch.rewards),
    raw_rewards: Float32Array.from(batch.raw_reward),
    rollout_mask_sums: Float64Array.from(batch.rollout_mask_sums),
    truncated: Uint8Array.from(batch.truncated),
    sample_indices: Int32Array.from(batch.sample_indices),
  };
  const routed = packRoutedExperts(batch);
  if (routed !== null) packed.routed_experts = routed;
  let tokenOffset = 0;
  let responseOffset = 0;
  for (let i = 0; i < count; i++) {
    const tokens = batch.tokens[i] as number[];
    const response = batch.response_lengths[i] as number;
    packed.tokens.set(tokens, tokenOffset);
    packed.total_lengths[i] = tokens.length;
    tokenOffset += tokens.length;
    copyResponseArray(batch.loss_masks[i], packed.loss_masks, responseOffset, response, `loss_masks[${i}]`);
    if (packed.rollout_log_probs) {
      const logprobs = batch.rollout_log_probs?.[i];
      copyResponseArray(
        logprobs,
        packed.rollout_log_probs,
        responseOffset,
        response,
        `rollout_log_probs[${i}]`,
      );
    }
    if (packed.teacher_log_probs) {
      const logprobs = batch.teacher_log_probs?.[i];
      copyResponseArray(
        logprobs,
        packed.teacher_log_probs,
        responseOffset,
        response,
        `teacher_log_probs[${i}]`,
      );
    }
    responseOffset += response;
  }
  return packed;
}

function copyResponseArray(
  source: readonly number[] | undefined,
  target: Uint8Array | Float32Array,
  offset: number,
  length: number,
  field: string,
): void {
  if (source === undefined || source.length !== length) {
    throw invalid(
      `train batch: ${field} has ${source?.length ?? 0} entries but the response has ${length} tokens`,
      {
        field,
      },
    );
  }
  target.set(source, offset);
}

/** Converts a packed batch back to slime's `train_data` dict (plain arrays). */
export function unpackTrainBatch(packed: PackedTrainBatch): TrainBatch {
  const tokens: number[][] = [];
  const lossMasks: number[][] = [];
  const logprobs: number[][] | undefined = packed.rollout_log_probs ? [] : undefined;
  const teacher: number[][] | undefined = packed.teacher_log_probs ? [] : undefined;
  const routed = packed.routed_experts ?? null;
  const routedExperts: RoutedExpertsValue[] | undefined = routed ? [] : undefined;
  let routedOffset = 0;
  let tokenOffset = 0;
  let responseOffset = 0;
  for (let i = 0; i < packed.sample_count; i++) {
    const length = packed.total_lengths[i] as number;
    const response = packed.response_lengths[i] as number;
    tokens.push(Array.from(packed.tokens.subarray(tokenOffset, tokenOffset + length)));
    lossMasks.push(Array.from(packed.loss_masks.subarray(responseOffset, responseOffset + response)));
    logprobs?.push(Array.from(packed.rollout_log_probs!.subarray(responseOffset, responseOffset + response)));
    teacher?.push(Array.from(packed.teacher_log_probs!.subarray(responseOffset, responseOffset + response)));
    if (routed && routedExperts) {
      const count = (length - 1) * routed.num_layers * routed.topk;
      routedExperts.push({
        rows: length - 1,
        numLayers: routed.num_layers,
        topk: routed.topk,
        ids: Int32Array.from(routed.ids.subarray(routedOffset, routedOffset + count)),
        dtype: routed.dtype,
      });
      routedOffset += count;
    }
    tokenOffset += length;
    responseOffset += response;
  }
  return {
    tokens,
    response_lengths: Array.from(packed.response_lengths),
    rewards: Array.from(packed.rewards),
    raw_reward: Array.from(packed.raw_rewards),
    truncated: Array.from(packed.truncated) as (0 | 1)[],
    sample_indices: Array.from(packed.sample_indices),
    rollout_ids: Array.from(packed.rollout_ids),
    loss_masks: lossMasks as (0 | 1)[][],
    rollout_mask_sums: Array.from(packed.rollout_mask_sums),
    total_lengths: Array.from(packed.total_lengths),
    ...(logprobs ? { rollout_log_probs: logprobs } : {}),
    ...(teacher ? { teacher_log_probs: teacher } : {}),
    ...(routedExperts ? { rollout_routed_experts: routedExperts } : {}),
  };
}
