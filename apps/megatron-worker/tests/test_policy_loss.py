import json
import os
import unittest

import numpy as np
import torch

from dressage_megatron_worker.errors import WorkerError
from dressage_megatron_worker.policy_loss import policy_loss, reducer_weights, resolve_options

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "policy-loss.json")
# camelCase options of the TypeScript reference → LossConfig names.
NAMES = {
    "epsClip": "eps_clip",
    "epsClipHigh": "eps_clip_high",
    "epsClipC": "eps_clip_c",
    "useTis": "use_tis",
    "tisClip": "tis_clip",
    "tisClipLow": "tis_clip_low",
    "useKlLoss": "use_kl_loss",
    "klLossCoef": "kl_loss_coef",
    "klLossType": "kl_loss_type",
    "entropyCoef": "entropy_coef",
    "calculatePerTokenLoss": "calculate_per_token_loss",
    "useRolloutLogProbs": "use_rollout_logprobs",
}


def tensor(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


class PolicyLossParityTest(unittest.TestCase):
    """The torch loss against @dressage/trainer-bridge's float64 reference on the shared fixture
    (test/policy-loss-fixture.test.ts keeps the file equal to what the reference computes)."""

    @classmethod
    def setUpClass(cls) -> None:
        with open(FIXTURE) as handle:
            cls.fixture = json.load(handle)

    def compute(self, case: dict, log_probs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        batch, inputs = self.fixture["batch"], self.fixture["inputs"]
        settings = case["options"]
        options = resolve_options({NAMES[key]: value for key, value in settings.items() if key in NAMES})
        lengths = np.array(batch["response_lengths"])
        masks = np.array(batch["loss_masks"])
        global_batch_size = settings.get("globalBatchSize") or len(set(batch["rollout_ids"]))
        weights = reducer_weights(
            lengths,
            masks,
            np.array(batch["rollout_mask_sums"]),
            options.calculate_per_token_loss,
            global_batch_size,
            settings.get("tokenNormalizer") or float(masks.sum()),
        )
        return policy_loss(
            options,
            tensor(weights),
            log_probs,
            tensor(np.repeat(batch["rewards"], lengths)),
            old_log_probs=tensor(inputs["oldLogProbs"]) if case["with_old"] else None,
            rollout_log_probs=tensor(batch["rollout_log_probs"]),
            entropy=tensor(inputs["entropy"]),
            ref_log_probs=tensor(inputs["refLogProbs"]) if options.use_kl_loss else None,
        )

    def test_every_case_matches_the_reference(self) -> None:
        for case in self.fixture["cases"]:
            with self.subTest(case["name"]):
                loss, metrics = self.compute(case, tensor(self.fixture["inputs"]["logProbs"]))
                self.assertEqual(set(metrics), set(case["expected"]))
                for name, expected in case["expected"].items():
                    self.assertAlmostEqual(float(metrics[name]), expected, places=12, msg=name)
                self.assertAlmostEqual(float(loss), case["expected"]["loss"], places=12)

    def test_the_gradient_matches_finite_differences(self) -> None:
        # The loss must also be differentiable the right way: clip branches carry no gradient, TIS
        # weights and old logprobs are constants. Cases whose old logprobs are the current ones
        # detached are left out (a finite difference would move the old logprobs too).
        for case in self.fixture["cases"]:
            if not case["with_old"] and not case["options"].get("useRolloutLogProbs"):
                continue
            with self.subTest(case["name"]):
                log_probs = tensor(self.fixture["inputs"]["logProbs"]).requires_grad_(True)
                loss, _ = self.compute(case, log_probs)
                loss.backward()
                for index in (0, 4, 9, 21):
                    shifted = []
                    for sign in (1, -1):
                        values = tensor(self.fixture["inputs"]["logProbs"])
                        values[index] += sign * 1e-6
                        shifted.append(float(self.compute(case, values)[0]))
                    numeric = (shifted[0] - shifted[1]) / 2e-6
                    self.assertAlmostEqual(float(log_probs.grad[index]), numeric, places=5)

    def test_invalid_settings_name_the_field(self) -> None:
        for fields, field in [
            ({"eps_clip": -0.1}, "loss.eps_clip"),
            ({"eps_clip_c": 0.5}, "loss.eps_clip_c"),
            ({"kl_loss_type": "k9"}, "loss.kl_loss_type"),
            ({"use_tis": True, "use_rollout_logprobs": True}, "loss.use_tis"),
            ({"tis_clip": 1.0, "tis_clip_low": 2.0}, "loss.tis_clip_low"),
            ({"entropy_coef": float("nan")}, "loss.entropy_coef"),
        ]:
            with self.subTest(field), self.assertRaises(WorkerError) as caught:
                resolve_options(fields)
            self.assertIn(field, caught.exception.message)

    def test_a_trainable_sample_needs_a_positive_denominator(self) -> None:
        with self.assertRaises(WorkerError) as caught:
            reducer_weights(np.array([2, 2]), np.array([1, 0, 1, 1]), np.array([1.0, 0.0]), False, 2, 0)
        self.assertIn("sample 1 has 2 trainable tokens but loss denominator 0.0", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
