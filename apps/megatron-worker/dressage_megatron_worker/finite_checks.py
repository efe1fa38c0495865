"""Nothing non-finite reaches the weights: the checks every actor shares. A Train batch with a NaN
or infinite number where training reads numbers is refused at the service boundary, naming the
sample and field; weights that are not all finite are never loaded, published or saved."""

from __future__ import annotations

from typing import Iterable

import grpc
import numpy as np

from .errors import WorkerError, invalid
from .packed_batch import PackedBatch

PER_SAMPLE_NUMBERS = ("rewards", "raw_rewards", "rollout_mask_sums")
PER_TOKEN_NUMBERS = ("rollout_log_probs", "teacher_log_probs")
# The smallest non-zero loss denominator (`MIN_ROLLOUT_MASK_SUM` of the TypeScript side): 1e-30
# would scale a sample's loss and gradient by 1e30.
MIN_ROLLOUT_MASK_SUM = 1e-6


def check_batch_values(batch: PackedBatch) -> None:
    """NaN or ±Infinity where training reads numbers is INVALID_ARGUMENT naming the sample, its
    rollout and the field (`checkTrainBatchValues` of the TypeScript side). The advantages slime
    computes come from the rewards, so finite rewards keep them finite."""
    for field in PER_SAMPLE_NUMBERS:
        values = getattr(batch, field)
        bad = ~np.isfinite(values)
        if np.any(bad):
            sample = int(np.argmax(bad))
            raise invalid(
                f"train batch: sample {sample} (rollout_id {int(batch.rollout_ids[sample])}) has {field} = "
                f"{values[sample]}; rewards, advantages, loss denominators and logprobs must be finite"
            )
    sums = batch.rollout_mask_sums
    tiny = (sums != 0) & ~(sums >= MIN_ROLLOUT_MASK_SUM)
    if np.any(tiny):
        sample = int(np.argmax(tiny))
        raise invalid(
            f"train batch: sample {sample} (rollout_id {int(batch.rollout_ids[sample])}) has rollout_mask_sums = "
            f"{sums[sample]}; a loss denominator is 0 or at least {MIN_ROLLOUT_MASK_SUM}"
        )
    for field in PER_TOKEN_NUMBERS:
        values = getattr(batch, field)
        if values is None:
            continue
        bad = ~np.isfinite(values)
        if np.any(bad):
            index = int(np.argmax(bad))
            ends = np.cumsum(batch.response_lengths, dtype=np.int64)
            sample = int(np.searchsorted(ends, index, side="right"))
            token = index - int(ends[sample] - batch.response_lengths[sample])
            raise invalid(
                f"train batch: sample {sample} (rollout_id {int(batch.rollout_ids[sample])}) has {field}[{token}] "
                f"(response token {token} of the sample) = {values[index]}; rewards, advantages, loss "
                "denominators and logprobs must be finite"
            )


def first_non_finite(arrays: Iterable[tuple[str, np.ndarray]]) -> tuple[str, int, float] | None:
    """The first (name, flat index, value) that is NaN or infinite, or None when all are finite
    (numpy arrays or torch tensors)."""
    for name, values in arrays:
        if hasattr(values, "isfinite"):
            # A torch tensor (any device or dtype): checked where it lives, copied only when bad.
            if bool(values.isfinite().all()):
                continue
            values = values.detach().float().cpu().numpy()
        flat = np.asarray(values).reshape(-1)
        bad = ~np.isfinite(flat)
        if np.any(bad):
            index = int(np.argmax(bad))
            return name, index, float(flat[index])
    return None


def require_finite_weights(arrays: Iterable[tuple[str, np.ndarray]], refused: str, why: str) -> None:
    """FAILED_PRECONDITION naming the first non-finite entry: `{refused}: parameter name[i] is nan;
    {why}`."""
    found = first_non_finite(arrays)
    if found is not None:
        name, index, value = found
        raise WorkerError(grpc.StatusCode.FAILED_PRECONDITION, f"{refused}: {name}[{index}] is {value}; {why}")
