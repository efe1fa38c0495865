"""From a PackedBatch to slime's rollout_data layout (the per-sample lists its Megatron actor reads),
with loss denominators that keep prompt-equal weighting exact under slime's reducer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import invalid
from .packed_batch import PackedBatch


@dataclass
class Denominators:
    """Loss denominators as handed to slime, and the factor they were multiplied by."""

    values: np.ndarray
    scale: float


def exact_denominators(batch: PackedBatch) -> Denominators:
    """slime's reducer divides by max(denominator, 1), which breaks prompt-equal weighting as soon as a
    denominator falls below 1. Multiplying every denominator by one factor, chosen so the smallest
    positive one is 1, keeps the ratios between samples, hence prompt-equal weighting, exact: the loss
    is uniformly divided by `scale`, which the caller compensates (or Adam absorbs). A sample with
    trainable tokens and a non-positive denominator is rejected; one without any keeps 0.
    """
    sums = batch.rollout_mask_sums.astype(np.float64)
    counts = trainable_counts(batch)
    bad = (counts > 0) & ~(np.isfinite(sums) & (sums > 0))
    if np.any(bad):
        first = int(np.argmax(bad))
        raise invalid(
            f"sample {first} has {int(counts[first])} trainable tokens but loss denominator {sums[first]}; "
            "rollout_mask_sums must be positive where the loss mask is not all zero"
        )
    positive = sums[(counts > 0) & (sums > 0)]
    smallest = float(positive.min()) if positive.size else 1.0
    scale = 1.0 / smallest if smallest < 1.0 else 1.0
    values = np.where(counts > 0, sums * scale, 0.0)
    return Denominators(values=values, scale=scale)


def trainable_counts(batch: PackedBatch) -> np.ndarray:
    """Trainable (mask 1) tokens of each sample."""
    running = np.concatenate(([0], np.cumsum(batch.loss_masks, dtype=np.int64)))
    ends = np.cumsum(batch.response_lengths, dtype=np.int64)
    return running[ends] - running[ends - batch.response_lengths]


def split_per_sample(values: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Views of `values`, one per sample, cut at the cumulative `lengths`."""
    bounds = np.cumsum(lengths, dtype=np.int64)[:-1]
    return np.split(values, bounds) if lengths.size else []


def to_rollout_data(batch: PackedBatch) -> dict[str, Any]:
    """slime's train_data keys (see the contract §3), per-token arrays as per-sample numpy views:
    tokens (int64, as slime tensorizes them), loss_masks (int32), rollout_log_probs (float32),
    rollout_mask_sums (float32, rescaled by exact_denominators)."""
    denominators = exact_denominators(batch)
    data: dict[str, Any] = {
        "tokens": [part.astype(np.int64) for part in split_per_sample(batch.tokens, batch.total_lengths)],
        "total_lengths": batch.total_lengths.astype(int).tolist(),
        "response_lengths": batch.response_lengths.astype(int).tolist(),
        "loss_masks": [
            part.astype(np.int32) for part in split_per_sample(batch.loss_masks, batch.response_lengths)
        ],
        "rewards": batch.rewards.astype(float).tolist(),
        "raw_reward": batch.raw_rewards.astype(float).tolist(),
        "truncated": batch.truncated.astype(int).tolist(),
        "sample_indices": batch.sample_indices.astype(int).tolist(),
        "rollout_ids": batch.rollout_ids.astype(int).tolist(),
        "rollout_mask_sums": denominators.values.astype(np.float32),
        "dressage_denominator_scale": denominators.scale,
    }
    if batch.rollout_log_probs is not None:
        data["rollout_log_probs"] = split_per_sample(batch.rollout_log_probs, batch.response_lengths)
    if batch.teacher_log_probs is not None:
        data["teacher_log_probs"] = split_per_sample(batch.teacher_log_probs, batch.response_lengths)
    if batch.routed_experts is not None:
        # (len(tokens) - 1, num_layers, topk) per sample in int32: what slime decodes SGLang's routed
        # experts to (slime/utils/types.py:352) and keeps (no dtype in _ROLLOUT_DATA_TENSOR_DTYPES).
        data["rollout_routed_experts"] = [part.astype(np.int32) for part in batch.routed_experts]
    return data
