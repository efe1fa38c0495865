import json
import unittest
from pathlib import Path

from dressage_megatron_worker.train_math import assign_rollout_ids, reward_post_process, rollout_mask_sums

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "shared-batch.json").read_text())


class SharedFixtureTest(unittest.TestCase):
    """The same numbers as @dressage/trainer-bridge on the shared fixture (the TypeScript side checks
    the fixture's expected values against its own functions)."""

    def test_every_case_matches_the_typescript_results(self) -> None:
        samples = FIXTURE["samples"]
        self.assertGreaterEqual(len(FIXTURE["cases"]), 5)
        for case in FIXTURE["cases"]:
            options, expected = case["options"], case["expected"]
            estimator = options["advantageEstimator"]
            with self.subTest(options=options):
                raw, rewards = reward_post_process(
                    samples, estimator, divide_by_std=options.get("standardDeviationNormalization", True)
                )
                self.assertEqual(raw, expected["raw_reward"])
                for got, want in zip(rewards, expected["rewards"], strict=True):
                    self.assertAlmostEqual(got, want, places=12)
                self.assertEqual(assign_rollout_ids(samples), expected["rollout_ids"])
                sums = rollout_mask_sums(samples, options.get("globalBatchSize"), estimator)
                for got, want in zip(sums, expected["rollout_mask_sums"], strict=True):
                    self.assertAlmostEqual(got, want, places=12)

    def test_prompt_equal_needs_a_global_batch_size(self) -> None:
        with self.assertRaises(ValueError):
            rollout_mask_sums(FIXTURE["samples"], None, "grpo")


if __name__ == "__main__":
    unittest.main()
