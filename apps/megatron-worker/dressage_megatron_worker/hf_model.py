"""A Hugging Face causal LM (`transformers`' `AutoModelForCausalLM`) as the torch actor's model
(`--model hf:DIRECTORY`): the same surface as `EmbeddedModel` — parameters by name, token ids in
and out, logits at chosen positions, weights read and written — so the actor's batch path, loss,
data-parallel schedule and Adam step are the embedded model's, unchanged. Weights are written in
the Hugging Face directory layout (`config.json` + `model.safetensors`, through `save_pretrained`)
beside the source directory's tokenizer files, which an SGLang or `transformers` engine loads.

`transformers` is imported only here, and only when such a model is asked for."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Mapping

import grpc
import numpy as np
import torch

from .embedded_checkpoint import TRAINER_STATE_FILE
from .errors import WorkerError

PREFIX = "hf:"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The weight version of a written directory (an engine learns it from the update request; a
# checkpoint needs it on disk).
VERSION_FILE = "dressage-weights.json"
# Top-level files of the source directory copied beside the weights: tokenizer, chat template,
# generation settings (an engine loads the written directory as a whole model). Weights and their
# indexes are never copied (`save_pretrained` writes those), nor the trainer state of a checkpoint
# the model started from (SaveCheckpoint writes its own).
COPIED_SUFFIXES = (".json", ".jinja", ".txt", ".model", ".tiktoken")
NOT_COPIED = (
    "config.json",
    VERSION_FILE,
    TRAINER_STATE_FILE,
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)


def model_directory(model: str) -> str | None:
    """The directory of `--model hf:DIRECTORY`, or None for an embedded checkpoint."""
    return model[len(PREFIX) :] if model.startswith(PREFIX) else None


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise WorkerError(
            grpc.StatusCode.FAILED_PRECONDITION,
            "--model hf:… needs the transformers package in this interpreter (pip install transformers safetensors)",
        ) from None
    return transformers


def _load(directory: str, dtype: str) -> Any:
    """`AutoModelForCausalLM.from_pretrained`, on the CPU, in `dtype`, in evaluation mode (no
    dropout: the trainer's logprobs are the engine's)."""
    transformers = _transformers()
    if not os.path.isfile(os.path.join(directory, "config.json")):
        raise WorkerError(grpc.StatusCode.NOT_FOUND, f"no Hugging Face model in {directory} (config.json missing)")
    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    # `dtype` replaced `torch_dtype` in transformers 4.56.
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    module = transformers.AutoModelForCausalLM.from_pretrained(directory, **{key: DTYPES[dtype]})
    module.eval()
    return module


def read_version(directory: str) -> str:
    path = os.path.join(directory, VERSION_FILE)
    if not os.path.isfile(path):
        return "default"
    with open(path, "rb") as handle:
        return str(json.loads(handle.read()).get("weight_version", "default"))


class HuggingFaceModel:
    """Parameters as the module's own leaf tensors by name (what the optimizer updates; tied
    weights appear once, under their first name) and logits at chosen positions."""

    def __init__(self, directory: str, dtype: str = "float32", device: torch.device | None = None) -> None:
        if dtype not in DTYPES:
            raise WorkerError(grpc.StatusCode.INVALID_ARGUMENT, f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        self.directory, self.dtype = directory, dtype
        self.device = device or torch.device("cpu")
        self.module = _load(directory, dtype).to(self.device)
        self.head = self.module.get_output_embeddings()
        if self.head is None or not hasattr(self.head, "weight"):
            raise WorkerError(
                grpc.StatusCode.INVALID_ARGUMENT, f"{directory}: {type(self.module).__name__} has no output layer"
            )
        self.parameters: dict[str, torch.Tensor] = dict(self.module.named_parameters())
        self.specs = [(name, tuple(tensor.shape)) for name, tensor in self.parameters.items()]
        text = self.module.config.get_text_config() if hasattr(self.module.config, "get_text_config") else self.module.config
        self.config = {"model_type": self.module.config.model_type, "context_length": int(text.max_position_embeddings)}
        self.input_count = int(self.module.get_input_embeddings().weight.shape[0])
        self.weight_version = read_version(directory)

    @property
    def output_count(self) -> int:
        return int(self.head.weight.shape[0])

    @property
    def description(self) -> str:
        """What GetInfo's backend names: `transformers 5.18.0 Qwen3ForCausalLM float32`."""
        return f"transformers {_transformers().__version__} {type(self.module).__name__} {self.dtype}"

    @property
    def vocab_size(self) -> int:
        return self.output_count

    @property
    def context_length(self) -> int:
        return self.config["context_length"]

    def slots_of(self, token_ids: np.ndarray) -> np.ndarray:
        """The ids themselves; −1 where the input embedding has no row."""
        ids = np.asarray(token_ids, dtype=np.int64)
        return np.where((ids >= 0) & (ids < self.input_count), ids, -1)

    def output_classes_of(self, token_ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(token_ids, dtype=np.int64)
        return np.where((ids >= 0) & (ids < self.output_count), ids, -1)

    def selected_logits(
        self, slots: torch.Tensor, flat: torch.Tensor, params: Mapping[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Logits `[len(flat), outputs]` at the flat positions `flat` of `slots` `[batch, length]`
        (right padding is harmless: attention never looks ahead). The output layer sees only those
        positions' hidden states (a pre-hook narrows its input), so the full `[batch, length,
        vocabulary]` logits never exist; anything the model does to the logits after its output
        layer (soft-capping, scaling) still runs. `params` other than the model's own (the KL
        reference) are swapped in with `torch.func.functional_call`."""

        def narrow(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            hidden = args[0]
            return (hidden.reshape(-1, hidden.shape[-1])[flat], *args[1:])

        handle = self.head.register_forward_pre_hook(narrow)
        try:
            inputs = {"input_ids": slots, "use_cache": False}
            if params is None or params is self.parameters:
                output = self.module(**inputs)
            else:
                output = torch.func.functional_call(self.module, dict(params), args=(), kwargs=inputs)
        finally:
            handle.remove()
        return output.logits

    def weights(self) -> dict[str, np.ndarray]:
        """A float32 copy of every weight, by name."""
        return {name: tensor.detach().float().cpu().numpy() for name, tensor in self.parameters.items()}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        with torch.no_grad():
            for name, parameter in self.parameters.items():
                value = weights[name]
                value = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
                parameter.copy_(value.to(device=parameter.device, dtype=parameter.dtype))

    def read(self, directory: str) -> tuple[dict[str, torch.Tensor], str]:
        """The weights of a Hugging Face directory (as `from_pretrained` reads them) and its weight
        version; FAILED_PRECONDITION when it is another model (type, names or shapes differ)."""
        other = _load(directory, self.dtype)
        parameters = dict(other.named_parameters())
        specs = [(name, tuple(tensor.shape)) for name, tensor in parameters.items()]
        if other.config.model_type != self.config["model_type"] or specs != self.specs:
            raise WorkerError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the checkpoint in {directory} is for a different model "
                f"({'type' if other.config.model_type != self.config['model_type'] else 'parameter names or shapes'} differ)",
            )
        return {name: tensor.detach() for name, tensor in parameters.items()}, read_version(directory)

    def write(self, directory: str, version: str) -> int:
        """Writes the weights as a Hugging Face model directory (`save_pretrained`: config.json,
        model.safetensors or its shards) with the source's tokenizer files and `VERSION_FILE`;
        returns the bytes written."""
        os.makedirs(directory, exist_ok=True)
        if os.path.abspath(directory) != os.path.abspath(self.directory):
            for name in sorted(os.listdir(self.directory)):
                source = os.path.join(self.directory, name)
                if name.endswith(COPIED_SUFFIXES) and name not in NOT_COPIED and os.path.isfile(source):
                    shutil.copyfile(source, os.path.join(directory, name))
        self.module.save_pretrained(directory)
        partial = os.path.join(directory, f"{VERSION_FILE}.tmp-{os.getpid()}")
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump({"weight_version": version}, handle)
            handle.write("\n")
        os.replace(partial, os.path.join(directory, VERSION_FILE))
        return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory))
