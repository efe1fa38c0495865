// The batch a rollout hands to training: refused when nothing in it trains, in the reference's group order.
import { DressageError, type Sample } from '@dressage/protocol';

/**
 * True when a batch holds at least one sample that trains something: kept, with a response, and with
 * a loss mask that is missing (all ones) or has a 1.
 */
export function hasTrainableSample(groups: readonly (readonly Sample[])[]): boolean {
  return groups.some((group) =>
    group.some(
      (sample) =>
        !sample.remove_sample &&
        sample.response_length > 0 &&
        (sample.loss_mask === null || sample.loss_mask.some((value) => value !== 0)),
    ),
  );
}

/** Throws the empty-train-batch error unless allowed. */
export function assertTrainableBatch(groups: readonly (readonly Sample[])[], allowEmpty: boolean): void {
  if (allowEmpty || hasTrainableSample(groups)) return;
  throw new DressageError({
    code: 'failed_precondition',
    message:
      `rollout produced no trainable samples (${groups.length} groups, none with a kept sample that has ` +
      'a response and a non-zero loss mask); set DRESSAGE_ALLOW_EMPTY_TRAIN_BATCH=1 to train on it anyway',
    details: { groups: groups.length },
  });
}

/** Sorts groups by their first sample's `index` (the reference's output order). */
export function sortGroupsByIndex<T extends { readonly index: number | null }>(groups: T[][]): T[][] {
  return groups.sort(
    (a, b) => (a[0]?.index ?? Number.MAX_SAFE_INTEGER) - (b[0]?.index ?? Number.MAX_SAFE_INTEGER),
  );
}
