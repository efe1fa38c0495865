"""A TrainBatch as numpy arrays, reassembled from the Train stream with the same checks as the
TypeScript TrainBatchAssembler (counts against the header, per-block lengths, masks of 0/1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from .errors import WorkerError, invalid

# Little-endian element types of the packed bytes fields (see trainer.proto).
INT32 = np.dtype("<i4")
UINT8 = np.dtype("u1")
FLOAT32 = np.dtype("<f4")
FLOAT64 = np.dtype("<f8")
# Routed expert ids travel in the width the inference engine recorded them in.
ROUTED_DTYPES = {"uint8": np.dtype("u1"), "uint16": np.dtype("<u2"), "int32": np.dtype("<i4")}


@dataclass
class PackedBatch:
    """Per-sample arrays have sample_count entries; per-token arrays concatenate the samples."""

    sample_count: int
    tokens: np.ndarray
    total_lengths: np.ndarray
    response_lengths: np.ndarray
    loss_masks: np.ndarray
    rollout_log_probs: np.ndarray | None
    teacher_log_probs: np.ndarray | None
    rollout_ids: np.ndarray
    rewards: np.ndarray
    raw_rewards: np.ndarray
    rollout_mask_sums: np.ndarray
    truncated: np.ndarray
    sample_indices: np.ndarray
    # Per sample, (len(tokens) - 1, num_layers, topk) expert ids in their wire dtype (routing replay).
    routed_experts: list[np.ndarray] | None = None


PER_SAMPLE = {
    "rollout_ids": INT32,
    "rewards": FLOAT32,
    "raw_rewards": FLOAT32,
    "rollout_mask_sums": FLOAT64,
    "truncated": UINT8,
    "sample_indices": INT32,
}


def _array(data: bytes, dtype: np.dtype, expected: int, field: str) -> np.ndarray:
    if len(data) % dtype.itemsize != 0:
        raise invalid(f"{field}: {len(data)} bytes is not a whole number of {dtype.name} elements")
    array = np.frombuffer(data, dtype=dtype)
    if array.size != expected:
        raise invalid(f"{field}: expected {expected} {dtype.name} elements, got {array.size}")
    return array


class BatchAssembler:
    """Feeds on TrainChunk messages; `finish()` returns (header, PackedBatch)."""

    def __init__(self, max_batch_tokens: int = 2**31 - 1, max_batch_samples: int = 2**31 - 1) -> None:
        self.header: Any = None
        self._routed: tuple[np.dtype, int, int] | None = None
        self._blocks: list[dict[str, np.ndarray | None]] = []
        self._samples = 0
        self._tokens = 0
        self._max_tokens = max_batch_tokens
        self._max_samples = max_batch_samples

    def push(self, chunk: Any) -> None:
        kind = chunk.WhichOneof("payload")
        if kind is None:
            raise invalid("train stream: a chunk carries neither a header nor samples")
        if kind == "header":
            if self.header is not None:
                raise invalid("train stream: a second header arrived")
            self.header = chunk.header
            self._routed = _routed_layout(self.header)
            if self.header.token_count > self._max_tokens or self.header.sample_count > self._max_samples:
                raise WorkerError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"batch {self.header.batch_id or '(no id)'} announces {self.header.sample_count} samples / "
                    f"{self.header.token_count} tokens; this trainer accepts at most "
                    f"{self._max_samples} / {self._max_tokens}",
                )
            return
        if self.header is None:
            raise invalid("train stream: sample block before the header")
        block = self._decode(chunk.samples, len(self._blocks))
        self._samples += int(block["total_lengths"].size)  # type: ignore[union-attr]
        self._tokens += int(block["tokens"].size)  # type: ignore[union-attr]
        if self._samples > self.header.sample_count:
            raise invalid(
                f"train stream: {self._samples} samples received, more than the header's {self.header.sample_count}"
            )
        self._blocks.append(block)

    def _decode(self, block: Any, index: int) -> dict[str, np.ndarray | None]:
        count = block.sample_count
        name = f"samples block {index}"
        total = _array(block.total_lengths, INT32, count, f"{name}: total_lengths")
        response = _array(block.response_lengths, INT32, count, f"{name}: response_lengths")
        if count and (np.any(total <= 0) or np.any(response < 0) or np.any(response > total)):
            raise invalid(f"{name}: a sample's response_length does not fit its total_length")
        token_total = int(total.sum(dtype=np.int64))
        response_total = int(response.sum(dtype=np.int64))
        masks = _array(block.loss_masks, UINT8, response_total, f"{name}: loss_masks")
        if masks.size and int(masks.max()) > 1:
            raise invalid(f"{name}: loss_masks holds values other than 0 and 1")
        decoded: dict[str, np.ndarray | None] = {
            "tokens": _array(block.tokens, INT32, token_total, f"{name}: tokens"),
            "total_lengths": total,
            "response_lengths": response,
            "loss_masks": masks,
        }
        for field in ("rollout_log_probs", "teacher_log_probs"):
            data = getattr(block, field)
            decoded[field] = (
                None
                if len(data) == 0 and response_total > 0
                else _array(data, FLOAT32, response_total, f"{name}: {field}")
            )
        for field, dtype in PER_SAMPLE.items():
            decoded[field] = _array(getattr(block, field), dtype, count, f"{name}: {field}")
        routed = getattr(block, "routed_experts", b"")
        if self._routed is None:
            if len(routed):
                raise invalid(f"{name}: routed_experts without a routed_experts layout in the header")
            decoded["routed_experts"] = None
        else:
            dtype, layers, topk = self._routed
            rows = int((total - 1).sum(dtype=np.int64))
            decoded["routed_experts"] = _array(routed, dtype, rows * layers * topk, f"{name}: routed_experts")
        return decoded

    def finish(self) -> tuple[Any, PackedBatch]:
        if self.header is None:
            raise invalid("train stream: ended without a header")
        if self._samples != self.header.sample_count or self._tokens != self.header.token_count:
            raise invalid(
                f"train stream: ended after {self._samples} samples / {self._tokens} tokens, header announced "
                f"{self.header.sample_count} / {self.header.token_count}"
            )
        blocks = self._blocks

        def join(field: str, dtype: np.dtype) -> np.ndarray:
            parts = [block[field] for block in blocks]
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)  # type: ignore[arg-type]

        def optional(field: str) -> np.ndarray | None:
            with_tokens = [block for block in blocks if block["loss_masks"].size > 0]  # type: ignore[union-attr]
            present = sum(1 for block in with_tokens if block[field] is not None)
            if present == 0:
                return None
            if present != len(with_tokens):
                raise invalid(f"train stream: {field} present in some blocks only")
            parts = [block[field] if block[field] is not None else np.zeros(0, FLOAT32) for block in blocks]
            return np.concatenate(parts)  # type: ignore[arg-type]

        batch = PackedBatch(
            sample_count=self._samples,
            tokens=join("tokens", INT32),
            total_lengths=join("total_lengths", INT32),
            response_lengths=join("response_lengths", INT32),
            loss_masks=join("loss_masks", UINT8),
            rollout_log_probs=optional("rollout_log_probs"),
            teacher_log_probs=optional("teacher_log_probs"),
            **{field: join(field, dtype) for field, dtype in PER_SAMPLE.items()},
        )
        if self._routed is not None:
            dtype, layers, topk = self._routed
            ids = join("routed_experts", dtype)
            rows = batch.total_lengths.astype(np.int64) - 1
            bounds = np.cumsum(rows * layers * topk)[:-1]
            batch.routed_experts = [
                part.reshape(int(count), layers, topk) for part, count in zip(np.split(ids, bounds), rows)
            ]
        return self.header, batch


def _routed_layout(header: Any) -> tuple[np.dtype, int, int] | None:
    """The header's routed-experts layout (dtype, num_layers, topk), or None when it has none."""
    if not header.HasField("routed_experts"):
        return None
    layout = header.routed_experts
    dtype = ROUTED_DTYPES.get(layout.dtype)
    if dtype is None or layout.num_layers <= 0 or layout.topk <= 0:
        raise invalid(
            f"routed_experts layout (dtype {layout.dtype!r}, num_layers {layout.num_layers}, topk {layout.topk}) "
            "needs dtype uint8, uint16 or int32 and a positive num_layers and topk"
        )
    return dtype, int(layout.num_layers), int(layout.topk)
