"""The reward post-processing and prompt-equal denominators the trainer relies on, over samples given
as plain dicts (the shared fixture's shape). Mirrors @dressage/trainer-bridge's rewardPostProcess and
computeRolloutMaskSums; tests check both against one fixture."""

from __future__ import annotations

import math
from typing import Any

STANDARD_DEVIATION_EPSILON = 1e-6
NORMALIZING = {"grpo", "gspo", "reinforce_plus_plus_baseline"}
DIVIDING = {"grpo", "gspo"}
PROMPT_EQUAL = {"grpo", "reinforce_plus_plus_baseline"}


def _trajectory(sample: dict[str, Any]) -> str | None:
    value = sample.get("metadata", {}).get("parent_traj_id")
    return value if isinstance(value, str) and value else None


def _reward(sample: dict[str, Any]) -> float:
    reward = sample.get("reward")
    return 0.0 if reward is None else float(reward)


def trajectory_anchors(samples: list[dict[str, Any]]) -> dict[str, int]:
    """Live segment with the highest segment_index per trajectory; ties go to the later sample."""
    anchors: dict[str, int] = {}
    for position, sample in enumerate(samples):
        trajectory = _trajectory(sample)
        if trajectory is None or sample.get("remove_sample"):
            continue
        index = sample.get("metadata", {}).get("segment_index", 0)
        current = anchors.get(trajectory)
        if current is None or index >= samples[current].get("metadata", {}).get("segment_index", 0):
            anchors[trajectory] = position
    return anchors


def reward_post_process(
    samples: list[dict[str, Any]],
    estimator: str = "grpo",
    normalize: bool = True,
    divide_by_std: bool = True,
) -> tuple[list[float], list[float]]:
    """(raw_rewards, rewards): anchors and live stand-alone samples centred per group_index, divided
    by the population standard deviation when above 1e-6 (grpo/gspo), broadcast to every live
    segment of a trajectory; removed samples keep their raw reward."""
    raw = [_reward(sample) for sample in samples]
    anchors = trajectory_anchors(samples)
    values = list(raw)
    if normalize and estimator in NORMALIZING:
        groups: dict[int, list[int]] = {}
        for position, sample in enumerate(samples):
            if sample.get("remove_sample"):
                continue
            trajectory = _trajectory(sample)
            if trajectory is not None and anchors.get(trajectory) != position:
                continue
            group = sample.get("group_index")
            groups.setdefault(-1 if group is None else group, []).append(position)
        for members in groups.values():
            mean = math.fsum(raw[p] for p in members) / len(members)
            deviation = math.sqrt(math.fsum((raw[p] - mean) ** 2 for p in members) / len(members))
            scale = deviation if divide_by_std and estimator in DIVIDING and deviation > STANDARD_DEVIATION_EPSILON else 1.0
            for p in members:
                values[p] = (raw[p] - mean) / scale
    rewards = []
    for position, sample in enumerate(samples):
        if sample.get("remove_sample"):
            rewards.append(raw[position])
            continue
        trajectory = _trajectory(sample)
        rewards.append(values[position if trajectory is None else anchors[trajectory]])
    return raw, rewards


def loss_masks(samples: list[dict[str, Any]]) -> list[list[int]]:
    masks = []
    for sample in samples:
        length = sample["response_length"]
        if sample.get("remove_sample"):
            masks.append([0] * length)
        elif sample.get("loss_mask") is None:
            masks.append([1] * length)
        else:
            masks.append(list(sample["loss_mask"]))
    return masks


def assign_rollout_ids(samples: list[dict[str, Any]]) -> list[int]:
    used = {sample["rollout_id"] for sample in samples if sample.get("rollout_id") is not None}
    ids, next_id = [], 0
    for sample in samples:
        if sample.get("rollout_id") is not None:
            ids.append(sample["rollout_id"])
            continue
        while next_id in used:
            next_id += 1
        used.add(next_id)
        ids.append(next_id)
    return ids


def rollout_mask_sums(
    samples: list[dict[str, Any]], global_batch_size: int | None, estimator: str = "grpo"
) -> list[float]:
    """Prompt-equal (grpo, reinforce_plus_plus_baseline): M_P × N / global_batch_size, M_P the trainable
    tokens of prompt P's live samples and N the prompts with any; other estimators: the total of the
    sample's rollout."""
    sums = [0 if sample.get("remove_sample") else sum(mask) for sample, mask in zip(samples, loss_masks(samples))]
    if estimator not in PROMPT_EQUAL:
        ids = assign_rollout_ids(samples)
        totals: dict[int, int] = {}
        for rollout, total in zip(ids, sums):
            totals[rollout] = totals.get(rollout, 0) + total
        return [float(totals[rollout]) for rollout in ids]
    if global_batch_size is None:
        raise ValueError(f"global_batch_size is required for the prompt-equal denominators of {estimator}")
    prompts: dict[str, int] = {}
    for sample, total in zip(samples, sums):
        if sample.get("remove_sample"):
            continue
        prompt = sample["metadata"]["instance_id"]
        prompts[prompt] = prompts.get(prompt, 0) + total
    live = sum(1 for total in prompts.values() if total > 0)
    scale = live / global_batch_size
    return [
        prompts.get(sample["metadata"]["instance_id"], 0) * scale
        if prompts.get(sample["metadata"]["instance_id"], 0) > 0
        else 0.0
        for sample in samples
    ]
