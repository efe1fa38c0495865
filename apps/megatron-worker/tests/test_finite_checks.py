import unittest

import grpc
import numpy as np

from dressage_megatron_worker.errors import WorkerError
from dressage_megatron_worker.finite_checks import check_batch_values, first_non_finite, require_finite_weights

from .torch_fixtures import policy_batch


class FiniteChecksTest(unittest.TestCase):
    def test_every_number_training_reads_is_checked_naming_sample_and_field(self) -> None:
        check_batch_values(policy_batch())
        cases = [
            ("rewards", 2, np.nan, "sample 2 (rollout_id 2) has rewards = nan"),
            ("raw_rewards", 5, np.inf, "sample 5 (rollout_id 5) has raw_rewards = inf"),
            ("rollout_mask_sums", 1, -np.inf, "sample 1 (rollout_id 1) has rollout_mask_sums = -inf"),
        ]
        for field, index, value, expected in cases:
            batch = policy_batch()
            getattr(batch, field)[index] = value
            with self.subTest(field), self.assertRaises(WorkerError) as caught:
                check_batch_values(batch)
            self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(expected, caught.exception.message)

    def test_per_token_logprobs_name_the_sample_and_its_response_token(self) -> None:
        for field in ("rollout_log_probs", "teacher_log_probs"):
            batch = policy_batch()
            if batch.teacher_log_probs is None:
                batch.teacher_log_probs = np.zeros_like(batch.rollout_log_probs)
            # The second response token of sample 1.
            index = int(batch.response_lengths[0]) + 1
            getattr(batch, field)[index] = np.nan
            with self.subTest(field), self.assertRaises(WorkerError) as caught:
                check_batch_values(batch)
            self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(f"sample 1 (rollout_id 1) has {field}[1] (response token 1 of the sample) = nan",
                          caught.exception.message)

    def test_weights_name_their_first_non_finite_entry(self) -> None:
        finite = [("a", np.ones((2, 2), np.float32))]
        self.assertIsNone(first_non_finite(finite))
        require_finite_weights(finite, "refused", "why")
        broken = [*finite, ("b", np.array([[1.0, 2.0], [np.inf, np.nan]], np.float32))]
        self.assertEqual(first_non_finite(broken), ("b", 2, float("inf")))
        with self.assertRaises(WorkerError) as caught:
            require_finite_weights(broken, "LoadCheckpoint refused", "load another")
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(caught.exception.message, "LoadCheckpoint refused: b[2] is inf; load another")


if __name__ == "__main__":
    unittest.main()
