"""The closed-form synthetic batch of @dressage/trainer-bridge's createSyntheticTrainBatch, rebuilt
with numpy, so a batch received over gRPC is checked field by field without sending a copy."""

from __future__ import annotations

import numpy as np

from .packed_batch import FLOAT32, PackedBatch

VOCABULARY = 151_000


def expected_fields(samples: int, tokens_per_sample: int, response_tokens: int, seed: int = 0) -> dict[str, np.ndarray]:
    i = np.arange(samples, dtype=np.int64)
    total = tokens_per_sample - (i % 5)
    response = np.clip(response_tokens - (i % 3), 0, total - 1)
    k = np.arange(int(total.sum()), dtype=np.int64)
    j = np.arange(int(response.sum()), dtype=np.int64)
    return {
        "tokens": ((k * 7919 + seed) % VOCABULARY).astype(np.int32),
        "total_lengths": total.astype(np.int32),
        "response_lengths": response.astype(np.int32),
        "loss_masks": np.where((j // 16) % 3 == 2, 0, 1).astype(np.uint8),
        # Computed in float64, rounded once to float32: the same value TypeScript stores.
        "rollout_log_probs": (-(j % 1000) * 0.002).astype(FLOAT32),
        "rollout_ids": (i // 4).astype(np.int32),
        "rewards": (((i % 7) - 3) / 4).astype(np.float32),
        "raw_rewards": ((i % 7) / 8).astype(np.float32),
        "rollout_mask_sums": ((i % 11) + 1) / 8,
        "truncated": (i % 9 == 0).astype(np.uint8),
        "sample_indices": i.astype(np.int32),
    }


def mismatched_fields(batch: PackedBatch, samples: int, tokens_per_sample: int, response_tokens: int, seed: int = 0) -> list[str]:
    """Names of the fields whose dtype, length or any value differs from the formulas."""
    expected = expected_fields(samples, tokens_per_sample, response_tokens, seed)
    wrong = [] if batch.sample_count == samples else ["sample_count"]
    for field, values in expected.items():
        actual = getattr(batch, field)
        if actual is None or actual.dtype.kind != values.dtype.kind or actual.shape != values.shape:
            wrong.append(field)
        elif not np.array_equal(actual, values):
            wrong.append(field)
    if batch.teacher_log_probs is not None:
        wrong.append("teacher_log_probs")
    return wrong
