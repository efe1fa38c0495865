"""The embedded model's checkpoint directory, as `@dressage/embedded` reads and writes it: a manifest
(`embedded-model.json`: format, model config, vocabulary of real token ids, weight version, SHA-256)
with the weights in `model.safetensors` (format v2), or in raw float32 `embedded-weights.bin` laid
out by the manifest's tensor list (v1, still read). Optionally the trainer state beside it
(`embedded-trainer.json`, `embedded-optimizer.bin`: Adam's moments, `embedded-reference.bin`: the
KL loss's frozen reference weights), which either trainer resumes."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from . import safetensors_format
from .errors import WorkerError

MANIFEST_FILE = "embedded-model.json"
LEGACY_WEIGHTS_FILE = "embedded-weights.bin"
WEIGHTS_FILE = "model.safetensors"
TRAINER_STATE_FILE = "embedded-trainer.json"
OPTIMIZER_STATE_FILE = "embedded-optimizer.bin"
REFERENCE_STATE_FILE = "embedded-reference.bin"
FORMAT_V1 = "dressage.embedded.checkpoint/v1"
FORMAT_V2 = "dressage.embedded.checkpoint/v2"
TRAINER_STATE_FORMAT = "dressage.embedded.trainer-state/v1"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

# The TypeScript schema's defaults: checkpoints written before a choice existed.
CONFIG_DEFAULTS = {"positionEncoding": "sinusoidal", "initialization": "small"}
CONFIG_KEYS = (
    "modelDimension",
    "layerCount",
    "headCount",
    "feedForwardDimension",
    "contextLength",
    "seed",
    "positionEncoding",
    "initialization",
)


def _error(code: grpc.StatusCode, message: str) -> WorkerError:
    return WorkerError(code, message)


def resolve_config(raw: Any, where: str) -> dict[str, Any]:
    """The model config with the schema's defaults and checks (`model-config.ts`)."""
    if not isinstance(raw, dict):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: model config is not an object")
    config = {**CONFIG_DEFAULTS, **raw}
    for key in CONFIG_KEYS[:6]:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or (key != "seed" and value <= 0):
            raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: model.{key} must be a positive integer, got {value!r}")
    if config["positionEncoding"] not in ("alibi", "rotary", "sinusoidal"):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: unknown positionEncoding {config['positionEncoding']!r}")
    if config["modelDimension"] % config["headCount"] != 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: headCount must divide modelDimension")
    head = config["modelDimension"] // config["headCount"]
    if config["positionEncoding"] == "rotary" and head % 2 != 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: rotary positions need an even head width")
    return {key: config[key] for key in CONFIG_KEYS}


def parameter_specs(config: dict[str, Any], output_count: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every parameter's name and shape, in checkpoint order (`parameterSpecs` of model.ts)."""
    width, hidden = config["modelDimension"], config["feedForwardDimension"]
    specs: list[tuple[str, tuple[int, ...]]] = [("embedding.token", (output_count + 1, width))]
    for layer in range(config["layerCount"]):
        prefix = f"layers.{layer}"
        specs += [
            (f"{prefix}.attention_norm.scale", (width,)),
            (f"{prefix}.attention_norm.bias", (width,)),
            (f"{prefix}.attention.query", (width, width)),
            (f"{prefix}.attention.key", (width, width)),
            (f"{prefix}.attention.value", (width, width)),
            (f"{prefix}.attention.output", (width, width)),
            (f"{prefix}.feed_forward_norm.scale", (width,)),
            (f"{prefix}.feed_forward_norm.bias", (width,)),
            (f"{prefix}.feed_forward.up", (width, hidden)),
            (f"{prefix}.feed_forward.up_bias", (hidden,)),
            (f"{prefix}.feed_forward.down", (hidden, width)),
            (f"{prefix}.feed_forward.down_bias", (width,)),
        ]
    specs += [
        ("final_norm.scale", (width,)),
        ("final_norm.bias", (width,)),
        ("output.projection", (width, output_count)),
        ("output.bias", (output_count,)),
    ]
    return specs


@dataclass
class Checkpoint:
    config: dict[str, Any]
    # Known real token ids, ascending (slot s+1 and output class s are vocabulary[s]).
    vocabulary: np.ndarray
    weights: dict[str, np.ndarray]
    weight_version: str


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_checkpoint(directory: str) -> Checkpoint:
    """Reads a v1 or v2 checkpoint, verifying its hash, names and shapes."""
    manifest_path = os.path.join(directory, MANIFEST_FILE)
    try:
        with open(manifest_path, "rb") as handle:
            manifest = json.loads(handle.read())
    except FileNotFoundError:
        raise _error(grpc.StatusCode.NOT_FOUND, f"no embedded checkpoint in {directory} ({MANIFEST_FILE} missing)") from None
    except json.JSONDecodeError as error:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{manifest_path}: not JSON ({error})") from None
    version = manifest.get("format") if isinstance(manifest, dict) else None
    if version not in (FORMAT_V1, FORMAT_V2):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{manifest_path}: unknown checkpoint format {version!r}")
    config = resolve_config(manifest.get("model"), manifest_path)
    ids = manifest.get("vocabulary")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{manifest_path}: vocabulary must be non-negative token ids")
    vocabulary = np.unique(np.asarray(ids, dtype=np.int64))
    weights_path = os.path.join(directory, WEIGHTS_FILE if version == FORMAT_V2 else LEGACY_WEIGHTS_FILE)
    try:
        with open(weights_path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise _error(grpc.StatusCode.NOT_FOUND, f"{weights_path} is missing") from None
    if _sha256(data) != manifest.get("sha256"):
        raise _error(grpc.StatusCode.DATA_LOSS, f"{weights_path} does not match the manifest's SHA-256")
    if version == FORMAT_V2:
        tensors, _metadata = safetensors_format.decode(data, weights_path)
    else:
        floats = np.frombuffer(data[: len(data) // 4 * 4], dtype="<f4")
        tensors = {}
        for entry in manifest.get("tensors", []):
            offset, length = int(entry["offset"]), int(entry["length"])
            if offset + length > floats.size:
                raise _error(grpc.StatusCode.DATA_LOSS, f"{weights_path}: tensor {entry['name']} runs past the file")
            tensors[entry["name"]] = floats[offset : offset + length].reshape(entry["shape"])
    weights = {}
    for name, shape in parameter_specs(config, int(vocabulary.size)):
        tensor = tensors.get(name)
        if tensor is None or tuple(tensor.shape) != shape or tensor.dtype != np.float32:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{directory}: tensor {name} is missing or not float32 {list(shape)}")
        weights[name] = tensor
    return Checkpoint(config, vocabulary, weights, str(manifest.get("weight_version", "default")))


def write_checkpoint(directory: str, checkpoint: Checkpoint, tokenizer_directory: str | None = None) -> int:
    """Writes a v2 checkpoint (weights first, manifest last, each renamed into place, so a reader
    never sees half of one); returns the bytes written."""
    os.makedirs(directory, exist_ok=True)
    specs = parameter_specs(checkpoint.config, int(checkpoint.vocabulary.size))
    data = safetensors_format.encode(
        {name: np.asarray(checkpoint.weights[name], dtype=np.float32).reshape(shape) for name, shape in specs},
        {"format": "pt", "dressage_format": FORMAT_V2},
    )
    manifest = {
        "format": FORMAT_V2,
        "model": checkpoint.config,
        "vocabulary": [int(i) for i in checkpoint.vocabulary],
        "weight_version": checkpoint.weight_version,
        "weights_file": WEIGHTS_FILE,
        "sha256": _sha256(data),
    }
    if tokenizer_directory is not None:
        for name in TOKENIZER_FILES:
            source = os.path.join(tokenizer_directory, name)
            if os.path.isfile(source):
                with open(source, "rb") as handle:
                    _write_atomic(os.path.join(directory, name), handle.read())
    _write_atomic(os.path.join(directory, WEIGHTS_FILE), data)
    text = (json.dumps(manifest, indent=2) + "\n").encode()
    _write_atomic(os.path.join(directory, MANIFEST_FILE), text)
    return len(data) + len(text)


def _write_atomic(path: str, data: bytes) -> None:
    partial = f"{path}.tmp-{os.getpid()}"
    with open(partial, "wb") as handle:
        handle.write(data)
    os.replace(partial, path)


@dataclass
class TrainerState:
    train_steps: int
    rollout_id: int
    weight_version: str
    learning_rate: float
    # Adam: step count, β1^t and β2^t, and per parameter (checkpoint order) the two moments.
    iterations: int = 0
    beta_powers: tuple[float, float] = (1.0, 1.0)
    first_moments: list[np.ndarray] | None = None
    second_moments: list[np.ndarray] | None = None
    # The KL loss's frozen reference weights per parameter (checkpoint order); None before a
    # `use_kl_loss` step froze them.
    reference: list[np.ndarray] | None = None
    # Recent policy-loss gradient norms (LossConfig.clip_grad_spike), oldest first.
    gradient_norms: list[float] = field(default_factory=list)


def _write_floats_atomic(path: str, arrays: list[np.ndarray]) -> tuple[int, str]:
    """Arrays as raw little-endian float32, one after another, streamed (one array's bytes at a time
    in memory); returns (bytes, SHA-256)."""
    digest = hashlib.sha256()
    size = 0
    partial = f"{path}.tmp-{os.getpid()}"
    with open(partial, "wb") as handle:
        for array in arrays:
            data = np.ascontiguousarray(array, dtype="<f4").tobytes()
            digest.update(data)
            handle.write(data)
            size += len(data)
    os.replace(partial, path)
    return size, digest.hexdigest()


def write_trainer_state(directory: str, state: TrainerState, parameter_names: list[str]) -> int:
    """`trainer-state.ts`'s layout: every first moment, then every second, as raw float32; the KL
    reference weights, when frozen, as raw float32 in parameter order. The manifest is written last
    (it names the hashes of the others)."""
    optimizer = None
    reference = None
    written = 0
    if state.first_moments is not None and state.second_moments is not None:
        size, sha256 = _write_floats_atomic(
            os.path.join(directory, OPTIMIZER_STATE_FILE), [*state.first_moments, *state.second_moments]
        )
        written += size
        optimizer = {
            "iterations": state.iterations,
            "beta_powers": list(state.beta_powers),
            "parameters": parameter_names,
            "sha256": sha256,
        }
    if state.reference is not None:
        size, sha256 = _write_floats_atomic(os.path.join(directory, REFERENCE_STATE_FILE), state.reference)
        written += size
        reference = {"parameters": parameter_names, "sha256": sha256}
    manifest: dict[str, Any] = {
        "format": TRAINER_STATE_FORMAT,
        "train_steps": state.train_steps,
        "rollout_id": state.rollout_id,
        "weight_version": state.weight_version,
        "learning_rate": state.learning_rate,
    }
    # Only when recorded, as trainer-state.ts writes it.
    if state.gradient_norms:
        manifest["gradient_norms"] = [float(norm) for norm in state.gradient_norms]
    manifest["optimizer"] = optimizer
    manifest["reference"] = reference
    text = json.dumps(manifest, indent=2).encode() + b"\n"
    _write_atomic(os.path.join(directory, TRAINER_STATE_FILE), text)
    return written + len(text)


def _read_hashed_floats(directory: str, file: str, sha256: Any, what: str) -> np.ndarray:
    path = os.path.join(directory, file)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise _error(grpc.StatusCode.DATA_LOSS, f"{path} is missing, but the trainer state names it") from None
    if _sha256(data) != sha256:
        raise _error(grpc.StatusCode.DATA_LOSS, f"{directory}: {what} does not match its SHA-256")
    return np.frombuffer(data, dtype="<f4")


def _split(values: np.ndarray, specs: list[tuple[str, tuple[int, ...]]], copies: int) -> list[np.ndarray]:
    """`copies` runs of every parameter (specs order) in `values`, as views."""
    arrays, offset = [], 0
    for _ in range(copies):
        for _, shape in specs:
            size = int(np.prod(shape))
            arrays.append(values[offset : offset + size].reshape(shape))
            offset += size
    return arrays


def read_trainer_state(directory: str, specs: list[tuple[str, tuple[int, ...]]]) -> TrainerState | None:
    """The trainer state beside a checkpoint, or None when the directory holds only a model."""
    path = os.path.join(directory, TRAINER_STATE_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        raw = json.loads(handle.read())
    if raw.get("format") != TRAINER_STATE_FORMAT:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{path}: unknown trainer state format {raw.get('format')!r}")
    state = TrainerState(
        train_steps=int(raw["train_steps"]),
        rollout_id=int(raw["rollout_id"]),
        weight_version=str(raw["weight_version"]),
        learning_rate=float(raw["learning_rate"]),
        gradient_norms=[float(norm) for norm in raw.get("gradient_norms", [])],
    )
    names = [name for name, _ in specs]
    total = sum(int(np.prod(shape)) for _, shape in specs)
    optimizer = raw.get("optimizer")
    if optimizer is not None:
        if optimizer.get("parameters") != names:
            raise _error(grpc.StatusCode.FAILED_PRECONDITION, f"{path}: the stored optimizer state is for a different model")
        values = _read_hashed_floats(directory, OPTIMIZER_STATE_FILE, optimizer.get("sha256"), "optimizer state")
        if values.size != 2 * total:
            raise _error(grpc.StatusCode.FAILED_PRECONDITION, f"{path}: the stored optimizer state is for a different model")
        moments = _split(values, specs, 2)
        state.iterations = int(optimizer["iterations"])
        state.beta_powers = (float(optimizer["beta_powers"][0]), float(optimizer["beta_powers"][1]))
        state.first_moments, state.second_moments = moments[: len(specs)], moments[len(specs) :]
    # Absent in trainer states written before the KL reference was stored, and null before a
    # `use_kl_loss` step froze one.
    reference = raw.get("reference")
    if reference is not None:
        if reference.get("parameters") != names:
            raise _error(grpc.StatusCode.FAILED_PRECONDITION, f"{path}: the stored KL reference weights are for a different model")
        values = _read_hashed_floats(directory, REFERENCE_STATE_FILE, reference.get("sha256"), "the KL reference weights")
        if values.size != total:
            raise _error(grpc.StatusCode.FAILED_PRECONDITION, f"{path}: the stored KL reference weights are for a different model")
        state.reference = _split(values, specs, 1)
    return state
