"""The embedded causal transformer of `@dressage/embedded` (model.ts) in PyTorch, operation for
operation: pre-norm blocks of multi-head attention and a ReLU feed-forward layer, rotary, ALiBi or
sinusoidal positions, an untied output layer over the known ids of the vocabulary. Same config,
tensor names and row-major `[in, out]` matrices, so weights move between the two unchanged and a
float32 logprob here matches the TypeScript engine's to float rounding."""

from __future__ import annotations

import math
from typing import Any

import grpc
import numpy as np
import torch

from .embedded_checkpoint import Checkpoint, parameter_specs, read_checkpoint, write_checkpoint
from .errors import WorkerError

# Additive mask value of model.ts: exp() underflows to exactly 0, the sum stays finite.
MASK_VALUE = -1e9
NORM_EPSILON = 1e-5


def rotary_tables(context: int, head_dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin `[context, head]`, rotate-half layout, computed in float64 and stored float32."""
    half = head_dimension // 2
    positions = np.arange(context, dtype=np.float64)[:, None]
    frequencies = np.array([10000.0 ** (index / half) for index in range(half)])
    angles = positions / frequencies[None, :]
    doubled = np.concatenate([angles, angles], axis=1)
    return np.cos(doubled).astype(np.float32), np.sin(doubled).astype(np.float32)


def sinusoidal_table(context: int, width: int) -> np.ndarray:
    table = np.zeros((context, width), dtype=np.float64)
    positions = np.arange(context, dtype=np.float64)
    for pair in range(width // 2):
        angle = positions / 10000.0 ** ((2 * pair) / width)
        table[:, 2 * pair] = np.sin(angle)
        table[:, 2 * pair + 1] = np.cos(angle)
    return table.astype(np.float32)


def alibi_slopes(heads: int) -> np.ndarray:
    return np.array([2.0 ** ((-8 * (head + 1)) / heads) for head in range(heads)], dtype=np.float64)


class EmbeddedModel:
    """Parameters as leaf tensors by name (what the optimizer updates) and the full forward pass."""

    def __init__(
        self,
        config: dict[str, Any],
        vocabulary: np.ndarray,
        weights: dict[str, np.ndarray],
        device: torch.device | None = None,
    ) -> None:
        self.config = config
        self.weight_version = "default"
        self.device = device or torch.device("cpu")
        self.vocabulary = np.asarray(vocabulary, dtype=np.int64)
        self.specs = parameter_specs(config, int(self.vocabulary.size))
        self.parameters: dict[str, torch.Tensor] = {
            name: torch.tensor(np.array(weights[name], dtype=np.float32).reshape(shape), device=self.device, requires_grad=True)
            for name, shape in self.specs
        }
        width, heads = config["modelDimension"], config["headCount"]
        self.head_dimension = width // heads
        self.attention_scale = 1.0 / math.sqrt(self.head_dimension)
        context = config["contextLength"]
        encoding = config["positionEncoding"]
        self._rotary = (
            tuple(torch.from_numpy(table).to(self.device) for table in rotary_tables(context, self.head_dimension))
            if encoding == "rotary"
            else None
        )
        self._positions = (
            torch.from_numpy(sinusoidal_table(context, width)).to(self.device) if encoding == "sinusoidal" else None
        )
        self._slopes = alibi_slopes(heads) if encoding == "alibi" else None

    @classmethod
    def open(cls, directory: str, device: torch.device | None = None) -> EmbeddedModel:
        """The model of an embedded checkpoint directory, with its weight version."""
        checkpoint = read_checkpoint(directory)
        model = cls(checkpoint.config, checkpoint.vocabulary, checkpoint.weights, device)
        model.weight_version = checkpoint.weight_version
        return model

    @property
    def output_count(self) -> int:
        return int(self.vocabulary.size)

    @property
    def description(self) -> str:
        """What GetInfo's backend names."""
        return "embedded model"

    @property
    def vocab_size(self) -> int:
        """Ids below the largest known id + 1 (what the embedded trainer reports)."""
        return int(self.vocabulary.max()) + 1

    @property
    def context_length(self) -> int:
        return int(self.config["contextLength"])

    def slots_of(self, token_ids: np.ndarray) -> np.ndarray:
        positions = np.searchsorted(self.vocabulary, token_ids)
        inside = positions < self.vocabulary.size
        known = np.zeros(token_ids.shape, dtype=bool)
        known[inside] = self.vocabulary[positions[inside]] == token_ids[inside]
        return np.where(known, positions + 1, 0).astype(np.int64)

    def output_classes_of(self, token_ids: np.ndarray) -> np.ndarray:
        return self.slots_of(token_ids) - 1

    def weights(self) -> dict[str, np.ndarray]:
        """A float32 copy of every weight, by name."""
        return {name: tensor.detach().cpu().numpy().copy() for name, tensor in self.parameters.items()}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        with torch.no_grad():
            for name, shape in self.specs:
                self.parameters[name].copy_(torch.from_numpy(np.array(weights[name], dtype=np.float32).reshape(shape)))

    def read(self, directory: str) -> tuple[dict[str, np.ndarray], str]:
        """The weights of an embedded checkpoint and its weight version; FAILED_PRECONDITION when it
        is another model (shape or vocabulary differ)."""
        checkpoint = read_checkpoint(directory)
        shape = {key: value for key, value in checkpoint.config.items() if key != "seed"}
        own = {key: value for key, value in self.config.items() if key != "seed"}
        if shape != own or not np.array_equal(checkpoint.vocabulary, self.vocabulary):
            what = "shape" if shape != own else "vocabulary"
            raise WorkerError(
                grpc.StatusCode.FAILED_PRECONDITION, f"the checkpoint in {directory} is for a different model ({what} differs)"
            )
        return checkpoint.weights, checkpoint.weight_version

    def write(self, directory: str, version: str) -> int:
        """Writes the weights as an embedded checkpoint labelled `version`; returns the bytes written."""
        return write_checkpoint(directory, Checkpoint(self.config, self.vocabulary, self.weights(), version))

    def _mask(self, length: int) -> torch.Tensor:
        rows = np.arange(length)[:, None]
        columns = np.arange(length)[None, :]
        if self._slopes is None:
            return torch.from_numpy(np.where(columns > rows, MASK_VALUE, 0.0).astype(np.float32)).to(self.device)
        distance = (rows - columns).astype(np.float64)
        values = np.where(columns <= rows, -self._slopes[:, None, None] * distance[None], MASK_VALUE)
        return torch.from_numpy(values.astype(np.float32)).to(self.device)

    def _layer_norm(self, hidden: torch.Tensor, prefix: str, params: dict[str, torch.Tensor]) -> torch.Tensor:
        mean = hidden.mean(dim=-1, keepdim=True)
        variance = ((hidden - mean) ** 2).mean(dim=-1, keepdim=True)
        return (hidden - mean) * torch.rsqrt(variance + NORM_EPSILON) * params[f"{prefix}.scale"] + params[f"{prefix}.bias"]

    def _rotate(self, tensor: torch.Tensor, length: int) -> torch.Tensor:
        if self._rotary is None:
            return tensor
        cos, sin = self._rotary[0][:length], self._rotary[1][:length]
        half = tensor.shape[-1] // 2
        rotated = torch.cat([-tensor[..., half:], tensor[..., :half]], dim=-1)
        return tensor * cos + rotated * sin

    def logits(self, slots: torch.Tensor, params: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Logits `[batch, length, outputs]` for input slots `[batch, length]` (right padding is
        harmless: attention never looks ahead)."""
        params = self.parameters if params is None else params
        width, heads = self.config["modelDimension"], self.config["headCount"]
        batch, length = slots.shape
        hidden = params["embedding.token"][slots.reshape(-1)]
        if self._positions is not None:
            hidden = (hidden.reshape(batch, length, width) + self._positions[:length]).reshape(batch * length, width)
        mask = self._mask(length)

        def split(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.reshape(batch, length, heads, self.head_dimension).transpose(1, 2)

        for layer in range(self.config["layerCount"]):
            prefix = f"layers.{layer}"
            normed = self._layer_norm(hidden, f"{prefix}.attention_norm", params)
            query = self._rotate(split(normed @ params[f"{prefix}.attention.query"]), length)
            key = self._rotate(split(normed @ params[f"{prefix}.attention.key"]), length)
            value = split(normed @ params[f"{prefix}.attention.value"])
            scores = (query @ key.transpose(-1, -2)) * self.attention_scale + mask
            attended = (torch.softmax(scores, dim=-1) @ value).transpose(1, 2).reshape(batch * length, width)
            hidden = hidden + attended @ params[f"{prefix}.attention.output"]
            normed = self._layer_norm(hidden, f"{prefix}.feed_forward_norm", params)
            up = torch.relu(normed @ params[f"{prefix}.feed_forward.up"] + params[f"{prefix}.feed_forward.up_bias"])
            hidden = hidden + (up @ params[f"{prefix}.feed_forward.down"] + params[f"{prefix}.feed_forward.down_bias"])
        normed = self._layer_norm(hidden, "final_norm", params)
        logits = normed @ params["output.projection"] + params["output.bias"]
        return logits.reshape(batch, length, self.output_count)

    def selected_logits(
        self, slots: torch.Tensor, flat: torch.Tensor, params: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Logits `[len(flat), outputs]` at the flat positions `flat` of `slots` `[batch, length]`."""
        logits = self.logits(slots, params)
        return logits.reshape(-1, logits.shape[-1])[flat]

    def sequence_logprobs(self, sequences: list[np.ndarray], temperature: float = 1.0) -> list[np.ndarray]:
        """Entry t of row i: the logprob of sequences[i][t + 1] given the tokens before it (NaN where
        that id is outside the vocabulary), as the engine reports it."""
        length = max((len(sequence) - 1 for sequence in sequences), default=0)
        if length <= 0:
            return [np.zeros(0, dtype=np.float32) for _ in sequences]
        slots = np.zeros((len(sequences), length), dtype=np.int64)
        targets = np.full((len(sequences), length), -1, dtype=np.int64)
        for row, sequence in enumerate(sequences):
            ids = np.asarray(sequence, dtype=np.int64)
            slots[row, : len(ids) - 1] = self.slots_of(ids[:-1])
            targets[row, : len(ids) - 1] = self.output_classes_of(ids[1:])
        with torch.no_grad():
            logits = self.logits(torch.from_numpy(slots).to(self.device))
            if temperature != 1:
                logits = logits / temperature
            logprobs = torch.log_softmax(logits, dim=-1)
            indices = torch.from_numpy(np.maximum(targets, 0)).to(self.device)[..., None]
            picked = torch.gather(logprobs, 2, indices)[..., 0].cpu().numpy()
        result = []
        for row, sequence in enumerate(sequences):
            values = picked[row, : len(sequence) - 1].copy()
            values[targets[row, : len(sequence) - 1] < 0] = np.nan
            result.append(values)
        return result
