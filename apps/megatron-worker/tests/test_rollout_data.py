import unittest

import numpy as np

from dressage_megatron_worker.errors import WorkerError
from dressage_megatron_worker.packed_batch import PackedBatch
from dressage_megatron_worker.rollout_data import exact_denominators, to_rollout_data, trainable_counts


def batch(masks: list[list[int]], sums: list[float], prompt_len: int = 2) -> PackedBatch:
    response = np.array([len(mask) for mask in masks], dtype=np.int32)
    total = response + prompt_len
    flat = np.array([value for mask in masks for value in mask], dtype=np.uint8)
    count = len(masks)
    return PackedBatch(
        sample_count=count,
        tokens=np.arange(int(total.sum()), dtype=np.int32),
        total_lengths=total.astype(np.int32),
        response_lengths=response,
        loss_masks=flat,
        rollout_log_probs=-np.arange(flat.size, dtype=np.float32) / 10,
        teacher_log_probs=None,
        rollout_ids=np.arange(count, dtype=np.int32),
        rewards=np.ones(count, dtype=np.float32),
        raw_rewards=np.ones(count, dtype=np.float32),
        rollout_mask_sums=np.array(sums, dtype=np.float64),
        truncated=np.zeros(count, dtype=np.uint8),
        sample_indices=np.arange(count, dtype=np.int32),
    )


def slime_reducer(values: list[np.ndarray], masks: list[np.ndarray], denominators: np.ndarray) -> float:
    """slime's per-rollout reducer: Σ_i Σ_t(x·mask) / max(d_i, 1)."""
    return float(sum((v * m).sum() / max(d, 1.0) for v, m, d in zip(values, masks, denominators)))


class DenominatorTest(unittest.TestCase):
    # Prompt p1: samples 0-2 (7 trainable tokens), p2: sample 3 (4). Global batch size 16:
    # denominators M_P × 2 / 16 = 0.875 and 0.5, both below 1.
    MASKS = [[1, 1, 1], [1, 0, 1], [1, 1], [1, 1, 1, 1], [0, 0]]
    SUMS = [0.875, 0.875, 0.875, 0.5, 0.0]

    def test_counts_trainable_tokens_per_sample(self) -> None:
        self.assertEqual(trainable_counts(batch(self.MASKS, self.SUMS)).tolist(), [3, 2, 2, 4, 0])

    def test_rescaling_keeps_prompt_equal_weighting_under_slimes_clamp(self) -> None:
        packed = batch(self.MASKS, self.SUMS)
        denominators = exact_denominators(packed)
        self.assertEqual(denominators.scale, 2.0)
        self.assertEqual(denominators.values.tolist(), [1.75, 1.75, 1.75, 1.0, 0.0])
        data = to_rollout_data(packed)
        ones = [np.ones(len(mask)) for mask in self.MASKS]
        only = lambda keep: [o if i in keep else np.zeros_like(o) for i, o in enumerate(ones)]  # noqa: E731
        p1 = slime_reducer(only({0, 1, 2}), data["loss_masks"], data["rollout_mask_sums"])
        p2 = slime_reducer(only({3}), data["loss_masks"], data["rollout_mask_sums"])
        self.assertAlmostEqual(p1, p2, places=6)
        # Without the rescale, slime's clamp would weigh the prompts 7 : 4.
        raw_p1 = slime_reducer(only({0, 1, 2}), data["loss_masks"], np.array(self.SUMS))
        raw_p2 = slime_reducer(only({3}), data["loss_masks"], np.array(self.SUMS))
        self.assertAlmostEqual(raw_p1 / raw_p2, 7 / 4)

    def test_denominators_at_or_above_one_are_unchanged(self) -> None:
        denominators = exact_denominators(batch(self.MASKS, [3.5, 3.5, 3.5, 2.0, 0.0]))
        self.assertEqual(denominators.scale, 1.0)
        self.assertEqual(denominators.values.tolist(), [3.5, 3.5, 3.5, 2.0, 0.0])

    def test_rejects_a_trainable_sample_without_a_denominator(self) -> None:
        with self.assertRaisesRegex(WorkerError, "sample 1 has 2 trainable tokens but loss denominator 0"):
            exact_denominators(batch(self.MASKS, [1.0, 0.0, 1.0, 1.0, 0.0]))


class RolloutDataTest(unittest.TestCase):
    def test_layout_matches_slimes_train_data(self) -> None:
        data = to_rollout_data(batch([[1, 0], [1, 1, 1]], [2.0, 3.0], prompt_len=3))
        self.assertEqual(data["total_lengths"], [5, 6])
        self.assertEqual(data["response_lengths"], [2, 3])
        self.assertEqual([t.tolist() for t in data["tokens"]], [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10]])
        self.assertEqual(data["tokens"][0].dtype, np.int64)
        self.assertEqual([m.tolist() for m in data["loss_masks"]], [[1, 0], [1, 1, 1]])
        self.assertEqual(data["loss_masks"][0].dtype, np.int32)
        self.assertEqual([p.dtype for p in data["rollout_log_probs"]], [np.float32, np.float32])
        self.assertEqual(data["rollout_mask_sums"].dtype, np.float32)
        for key in ("rewards", "raw_reward", "truncated", "sample_indices", "rollout_ids"):
            self.assertEqual(len(data[key]), 2, key)


if __name__ == "__main__":
    unittest.main()
