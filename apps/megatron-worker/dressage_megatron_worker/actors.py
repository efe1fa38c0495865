"""Training actors: what the service drives. `SlimeMegatronActor` (slime_actor.py) trains Megatron
through slime; `RecordingActor` is the in-process stand-in used by tests and the transfer benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

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
    data_parallel_size: int
    # The engines' weight version once started ("" when unknown).
    weight_version: str

    def train(self, rollout_id: int, header: Any, batch: PackedBatch, loss: dict[str, Any]) -> TrainResult: ...

    def update_weights(self, weight_version: str, engine_urls: list[str]) -> tuple[str, int]: ...

    def save_checkpoint(self, path: str, rollout_id: int) -> tuple[str, int]:
        """Returns the directory written and its size in bytes."""
        ...

    def load_checkpoint(self, path: str) -> int: ...


class RecordingActor:
    """Keeps the last batch and its slime rollout_data; with `verify`, checks it against the synthetic
    formulas and reports `mismatched_fields` (0 when every field matched) as a metric."""

    kind = "recording"
    backend = "numpy"

    def __init__(self, verify: tuple[int, int, int, int] | None = None) -> None:
        self.verify = verify
        self.batches: list[tuple[Any, PackedBatch, dict[str, Any]]] = []
        self.updates = 0
        self.weight_version = ""
        self.data_parallel_size = 1
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
        self.updates += 1
        self.weight_version = weight_version or str(self.updates)
        return self.weight_version, len(engine_urls)

    def save_checkpoint(self, path: str, rollout_id: int) -> tuple[str, int]:
        self.checkpoints[path] = rollout_id
        return path, 0

    def load_checkpoint(self, path: str) -> int:
        return self.checkpoints.get(path, 0)


class SinkActor(RecordingActor):
    """Accepts every batch and keeps nothing: measures transfer and reassembly alone (benchmarks)."""

    kind = "sink"

    def train(self, rollout_id: int, header: Any, batch: PackedBatch, loss: dict[str, Any]) -> TrainResult:
        return TrainResult(batch.sample_count, int(batch.tokens.size), 0, {})
