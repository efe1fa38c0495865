"""Training actors: what the service drives. `SlimeMegatronActor` trains Megatron through slime;
`RecordingActor` is the in-process stand-in used by tests and the transfer benchmark."""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from .packed_batch import PackedBatch
from .rollout_data import to_rollout_data
from .synthetic import mismatched_fields


@dataclass
class TrainResult:
    samples_trained: int
    tokens_trained: int
    optimizer_steps: int = 1
    metrics: dict[str, float] = field(default_factory=dict)


class TrainingActor(Protocol):
    """What a trainer backend implements. Every method may raise WorkerError."""

    kind: str
    backend: str

    def train(self, rollout_id: int, header: Any, batch: PackedBatch, loss: dict[str, Any]) -> TrainResult: ...

    def update_weights(self, weight_version: str, engine_urls: list[str]) -> tuple[str, int]: ...

    def save_checkpoint(self, path: str, rollout_id: int) -> int: ...

    def load_checkpoint(self, path: str) -> int: ...


class RecordingActor:
    """Keeps the last batch and its slime rollout_data; with `verify`, checks it against the synthetic
    formulas and reports `mismatched_fields` (0 when every field matched) as a metric."""

    kind = "recording"
    backend = "numpy"

    def __init__(self, verify: tuple[int, int, int, int] | None = None) -> None:
        self.verify = verify
        self.batches: list[tuple[Any, PackedBatch, dict[str, Any]]] = []
        self.weight_version = 0
        self.checkpoints: dict[str, int] = {}

    def train(self, rollout_id: int, header: Any, batch: PackedBatch, loss: dict[str, Any]) -> TrainResult:
        rollout_data = to_rollout_data(batch)
        self.batches = [(header, batch, rollout_data)]
        metrics = {"denominator_scale": float(rollout_data["dressage_denominator_scale"])}
        if self.verify is not None:
            wrong = mismatched_fields(batch, *self.verify)
            metrics["mismatched_fields"] = float(len(wrong))
            for name in wrong:
                metrics[f"mismatch/{name}"] = 1.0
        return TrainResult(batch.sample_count, int(batch.tokens.size), 1, metrics)

    def update_weights(self, weight_version: str, engine_urls: list[str]) -> tuple[str, int]:
        self.weight_version += 1
        return weight_version or str(self.weight_version), len(engine_urls)

    def save_checkpoint(self, path: str, rollout_id: int) -> int:
        self.checkpoints[path] = rollout_id
        return 0

    def load_checkpoint(self, path: str) -> int:
        return self.checkpoints.get(path, 0)


class SinkActor(RecordingActor):
    """Accepts every batch and keeps nothing: measures transfer and reassembly alone (benchmarks)."""

    kind = "sink"

    def train(self, rollout_id: int, header: Any, batch: PackedBatch, loss: dict[str, Any]) -> TrainResult:
        return TrainResult(batch.sample_count, int(batch.tokens.size), 0, {})


# slime's CLI flag for each LossConfig field (see the contract §9).
LOSS_FLAGS = {
    "advantage_estimator": "advantage_estimator",
    "eps_clip": "eps_clip",
    "eps_clip_high": "eps_clip_high",
    "eps_clip_c": "eps_clip_c",
    "use_tis": "use_tis",
    "tis_clip": "tis_clip",
    "tis_clip_low": "tis_clip_low",
    "use_kl_loss": "use_kl_loss",
    "kl_loss_coef": "kl_loss_coef",
    "kl_loss_type": "kl_loss_type",
    "entropy_coef": "entropy_coef",
    "calculate_per_token_loss": "calculate_per_token_loss",
    "learning_rate": "lr",
    "use_rollout_logprobs": "use_rollout_logprobs",
}


def loss_overrides(loss_config: Any) -> dict[str, Any]:
    """The LossConfig fields the client set, as slime argument names."""
    return {flag: getattr(loss_config, name) for name, flag in LOSS_FLAGS.items() if loss_config.HasField(name)}


class SlimeMegatronActor:
    """Trains Megatron through slime's training actors (a RayTrainGroup), the way slime's train.py
    does, with our batches in place of its rollout manager's. Nothing of slime, Megatron, torch or Ray
    is imported until `start()`, so the worker, its tests and CI run without them.

    Flow of one Train call: rollout_data (exact denominators, see rollout_data.py) → split over the
    data-parallel ranks with slime's DP schedule → `ray.put` per rank → `actor_model.async_train`.
    UpdateWeights calls `actor_model.update_weights()` (slime pushes to its SGLang engines);
    SaveCheckpoint calls `actor_model.save_model(rollout_id)`.
    """

    kind = "megatron"
    backend = "megatron"

    def __init__(self, args: Any, importer: Callable[[str], Any] | None = None) -> None:
        self.args = args
        self._import = importer or importlib.import_module
        self._actor_model: Any = None
        self._ray: Any = None
        self.weight_version = 0

    def start(self) -> None:
        """Allocates GPUs and creates the training actors (slime.ray.placement_group)."""
        self._ray = self._import("ray")
        placement = self._import("slime.ray.placement_group")
        groups = placement.create_placement_groups(self.args)
        self._actor_model, _critic = placement.create_training_models(self.args, groups, wandb_run_id=None)

    def _require_started(self) -> Any:
        if self._actor_model is None:
            self.start()
        return self._actor_model

    def split_by_data_parallel(self, rollout_data: dict[str, Any], global_batch_size: int) -> list[Any]:
        """One payload per DP rank, as slime's rollout manager builds them (contract §3, §5)."""
        schedule_module = self._import("slime.utils.dp_schedule")
        dp_size = int(getattr(self.args, "dp_size", 1))
        schedule = schedule_module.build_dp_schedule(
            self.args,
            {
                "dp_size": dp_size,
                "cp_size": int(getattr(self.args, "context_parallel_size", 1)),
                "vpp_size": int(getattr(self.args, "virtual_pipeline_model_parallel_size", None) or 1),
                "microbatch_group_size_per_vp_stage": int(
                    getattr(self.args, "microbatch_group_size_per_vp_stage", None) or 1
                ),
            },
            total_lengths=rollout_data["total_lengths"],
            global_batch_size=global_batch_size,
            rollout_indices=rollout_data["rollout_ids"],
        )
        sliced = [
            key
            for key in (
                "tokens",
                "response_lengths",
                "rewards",
                "truncated",
                "loss_masks",
                "sample_indices",
                "rollout_ids",
                "rollout_log_probs",
                "teacher_log_probs",
            )
            if key in rollout_data
        ]
        payloads = []
        for rank in range(dp_size):
            partition = list(schedule.partitions[rank])
            payload: dict[str, Any] = {"partition": partition}
            for key in sliced:
                payload[key] = [rollout_data[key][i] for i in partition]
            payload["rollout_mask_sums"] = rollout_data["rollout_mask_sums"][partition]
            payload["raw_reward"] = rollout_data["raw_reward"]
            payload["total_lengths"] = rollout_data["total_lengths"]
            payload["global_batch_sizes"] = list(schedule.global_batch_sizes)
            payload["num_microbatches"] = list(schedule.num_microbatches)
            payload["micro_batch_indices"] = schedule.micro_batch_indices[rank]
            payloads.append(payload)
        return payloads

    def train(self, rollout_id: int, header: Any, batch: PackedBatch, loss: dict[str, Any]) -> TrainResult:
        actor_model = self._require_started()
        for name, value in loss.items():
            setattr(self.args, name, value)
        rollout_data = to_rollout_data(batch)
        scale = rollout_data.pop("dressage_denominator_scale")
        global_batch_size = header.global_batch_size or len(set(rollout_data["rollout_ids"]))
        box_type = self._import("slime.utils.misc").Box
        refs = [box_type(self._ray.put(payload)) for payload in self.split_by_data_parallel(rollout_data, global_batch_size)]
        started = time.monotonic()
        self._ray.get(actor_model.async_train(rollout_id, refs))
        return TrainResult(
            batch.sample_count,
            int(batch.tokens.size),
            max(1, len(set(rollout_data["rollout_ids"])) // global_batch_size),
            {"denominator_scale": float(scale), "train_seconds": time.monotonic() - started},
        )

    def update_weights(self, weight_version: str, engine_urls: list[str]) -> tuple[str, int]:
        self._require_started().update_weights()
        self.weight_version += 1
        return weight_version or str(self.weight_version), len(engine_urls)

    def save_checkpoint(self, path: str, rollout_id: int) -> int:
        if path:
            self.args.save = path
        self._require_started().save_model(rollout_id)
        return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file()) if path and os.path.isdir(path) else 0

    def load_checkpoint(self, path: str) -> int:
        # slime loads checkpoints when its actors start (--load); restart the worker with --load PATH.
        self.args.load = path
        self._actor_model = None
        self._require_started()
        return int(getattr(self.args, "start_rollout_id", 0) or 0)
