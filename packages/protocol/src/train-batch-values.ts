import { DressageError } from './errors.js';
import type { PackedTrainBatch } from './train-batch-packing.js';

// Index of the first NaN or ±Infinity, or -1. x·0 is 0 for every finite x and NaN otherwise, so one
// branch-free pass finds whether there is one (the scan that names it runs only then); one function
// per array type keeps each loop monomorphic.
function firstNonFinite32(values: Float32Array): number {
  let probe = 0;
  for (let index = 0; index < values.length; index++) probe += (values[index] as number) * 0;
  return probe === 0 ? -1 : values.findIndex((value) => !Number.isFinite(value));
}

function firstNonFinite64(values: Float64Array): number {
  let probe = 0;
  for (let index = 0; index < values.length; index++) probe += (values[index] as number) * 0;
  return probe === 0 ? -1 : values.findIndex((value) => !Number.isFinite(value));
}

function reject(
  batch: PackedTrainBatch,
  sample: number,
  field: string,
  value: number,
  token: number | null,
): never {
  const where = token === null ? field : `${field}[${token}] (response token ${token} of the sample)`;
  throw new DressageError({
    code: 'invalid_argument',
    message: `train batch: sample ${sample} (rollout_id ${batch.rollout_ids[sample]}) has ${where} = ${value}; rewards, advantages, loss denominators and logprobs must be finite`,
    details: {
      sample,
      rollout_id: batch.rollout_ids[sample],
      field,
      value: String(value),
      ...(token === null ? {} : { response_token: token }),
    },
  });
}

/** The smallest non-zero `rollout_mask_sums` entry a trainer accepts (a loss denominator). */
export const MIN_ROLLOUT_MASK_SUM = 1e-6;

/**
 * Rejects a batch carrying NaN or ±Infinity where training reads numbers: `rewards` (the advantage
 * for GRPO-style estimators), `raw_rewards`, `rollout_mask_sums`, and the `rollout_log_probs` and
 * `teacher_log_probs` of every response token (a masked-out token too: 0 × NaN is NaN). One such
 * value turns every weight into NaN after a single step.
 *
 * A non-zero `rollout_mask_sums` entry below {@link MIN_ROLLOUT_MASK_SUM} (or negative) is refused
 * too: dividing by it scales a sample's loss beyond anything float32 weights survive.
 *
 * @throws DressageError `invalid_argument` naming the sample, its rollout id, the field and the value.
 */
export function checkTrainBatchValues(batch: PackedTrainBatch): void {
  for (const field of ['rewards', 'raw_rewards'] as const) {
    const index = firstNonFinite32(batch[field]);
    if (index >= 0) reject(batch, index, field, batch[field][index] as number, null);
  }
  const sums = firstNonFinite64(batch.rollout_mask_sums);
  if (sums >= 0) reject(batch, sums, 'rollout_mask_sums', batch.rollout_mask_sums[sums] as number, null);
  // A loss denominator is a count of response tokens: 0 for a sample that trains on nothing, else
  // well above zero. 1e-30 would multiply that sample's loss (and gradient) by 1e30.
  const tiny = batch.rollout_mask_sums.findIndex((value) => value !== 0 && !(value >= MIN_ROLLOUT_MASK_SUM));
  if (tiny >= 0) {
    const value = batch.rollout_mask_sums[tiny] as number;
    throw new DressageError({
      code: 'invalid_argument',
      message: `train batch: sample ${tiny} (rollout_id ${batch.rollout_ids[tiny]}) has rollout_mask_sums = ${value}; a loss denominator is 0 or at least ${MIN_ROLLOUT_MASK_SUM}`,
      details: {
        sample: tiny,
        rollout_id: batch.rollout_ids[tiny],
        field: 'rollout_mask_sums',
        value: String(value),
      },
    });
  }
  for (const field of ['rollout_log_probs', 'teacher_log_probs'] as const) {
    const values = batch[field];
    if (values === null) continue;
    const index = firstNonFinite32(values);
    if (index < 0) continue;
    let sample = 0;
    let start = 0;
    while (sample < batch.sample_count - 1 && start + (batch.response_lengths[sample] as number) <= index) {
      start += batch.response_lengths[sample] as number;
      sample += 1;
    }
    reject(batch, sample, field, values[index] as number, index - start);
  }
}
