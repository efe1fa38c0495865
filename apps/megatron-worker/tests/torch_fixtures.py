"""Small embedded checkpoints and policy batches for the torch actor's tests."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from dressage_megatron_worker.embedded_checkpoint import Checkpoint, parameter_specs, write_checkpoint
from dressage_megatron_worker.packed_batch import PackedBatch

VOCABULARY = np.array([3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610], dtype=np.int64)


def tiny_config(**changes: Any) -> dict[str, Any]:
    config = {
        "modelDimension": 16,
        "layerCount": 2,
        "headCount": 2,
        "feedForwardDimension": 32,
        "contextLength": 32,
        "seed": 1,
        "positionEncoding": "rotary",
        "initialization": "fan_in",
    }
    config.update(changes)
    return config


def random_weights(config: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    generator = np.random.default_rng(seed)
    weights = {}
    for name, shape in parameter_specs(config, VOCABULARY.size):
        if name.endswith("norm.scale"):
            weights[name] = (1 + 0.1 * generator.standard_normal(shape)).astype(np.float32)
        else:
            scale = 1.0 if name == "embedding.token" else 1 / np.sqrt(shape[0])
            weights[name] = (scale * generator.standard_normal(shape)).astype(np.float32)
    return weights


def write_tiny_checkpoint(directory: str | None = None, seed: int = 0, **changes: Any) -> str:
    directory = directory or tempfile.mkdtemp(prefix="torch-actor-test-")
    config = tiny_config(**changes)
    write_checkpoint(directory, Checkpoint(config, VOCABULARY, random_weights(config, seed), "0"))
    return directory


def policy_batch(samples: int = 8, seed: int = 1, rollouts_per_prompt: int = 4) -> PackedBatch:
    """Prompts of 3..6 tokens, responses of 2..7, masks with holes, rewards centred per group,
    prompt-equal denominators (some below 1)."""
    generator = np.random.default_rng(seed)
    tokens, totals, responses, masks, logprobs = [], [], [], [], []
    for _ in range(samples):
        prompt = int(generator.integers(3, 7))
        response = int(generator.integers(2, 8))
        tokens.append(generator.choice(VOCABULARY, prompt + response))
        totals.append(prompt + response)
        responses.append(response)
        mask = (generator.random(response) > 0.2).astype(np.uint8)
        mask[0] = 1
        masks.append(mask)
        logprobs.append(-generator.random(response).astype(np.float32) * 3)
    mask_all = np.concatenate(masks)
    counts = np.array([int(mask.sum()) for mask in masks], dtype=np.float64)
    groups = np.arange(samples) // rollouts_per_prompt
    per_prompt = np.array([counts[groups == group].sum() for group in groups])
    prompts = len(set(groups.tolist()))
    rewards = generator.standard_normal(samples).astype(np.float32)
    return PackedBatch(
        sample_count=samples,
        tokens=np.concatenate(tokens).astype(np.int32),
        total_lengths=np.array(totals, dtype=np.int32),
        response_lengths=np.array(responses, dtype=np.int32),
        loss_masks=mask_all,
        rollout_log_probs=np.concatenate(logprobs).astype(np.float32),
        teacher_log_probs=None,
        rollout_ids=np.arange(samples, dtype=np.int32),
        rewards=rewards,
        raw_rewards=rewards.copy(),
        rollout_mask_sums=per_prompt * prompts / samples,
        truncated=np.zeros(samples, dtype=np.uint8),
        sample_indices=np.arange(samples, dtype=np.int32),
    )


def cleanup(directory: str) -> None:
    for root, _dirs, files in os.walk(directory, topdown=False):
        for name in files:
            os.remove(os.path.join(root, name))
        os.rmdir(root)
