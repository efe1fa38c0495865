"""The safetensors file format, read and written with numpy alone (the `safetensors` package is not
needed): 8 bytes of little-endian header length, a JSON header naming each tensor's dtype, shape
and byte range (plus an optional `__metadata__` of strings), then the raw little-endian bytes.
Both ecosystems read it, so it is how weights move between the Python trainer and the TypeScript
engine."""

from __future__ import annotations

import json
import os
from typing import Mapping

import grpc
import numpy as np

from .errors import WorkerError

DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
# A header larger than this is not a weights file (the reference implementation's limit).
MAX_HEADER_BYTES = 100_000_000


def _corrupt(path: str, message: str) -> WorkerError:
    return WorkerError(grpc.StatusCode.DATA_LOSS, f"{path}: not a valid safetensors file: {message}")


def encode(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a safetensors file holding `tensors` in the given order."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(key): str(value) for key, value in metadata.items()}
    offset = 0
    parts = []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array)
        dtype = data.dtype.newbyteorder("<") if data.dtype.byteorder == ">" else data.dtype
        if dtype not in NAMES:
            raise ValueError(f"tensor {name}: dtype {data.dtype} has no safetensors name")
        raw = data.astype(dtype, copy=False).tobytes()
        header[name] = {"dtype": NAMES[dtype], "shape": list(data.shape), "data_offsets": [offset, offset + len(raw)]}
        parts.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    # The data starts 8-byte aligned: pad the header with spaces, as the reference writer does.
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(parts)


def decode(data: bytes, path: str = "safetensors") -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Tensors (read-only views of `data`) and metadata of a safetensors file's bytes."""
    if len(data) < 8:
        raise _corrupt(path, "shorter than its 8-byte header length")
    length = int.from_bytes(data[:8], "little")
    if length > MAX_HEADER_BYTES or 8 + length > len(data):
        raise _corrupt(path, f"header length {length} does not fit the {len(data)}-byte file")
    try:
        header = json.loads(data[8 : 8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _corrupt(path, f"header is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise _corrupt(path, "header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    body = memoryview(data)[8 + length :]
    tensors: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        try:
            dtype = DTYPES[entry["dtype"]]
            shape = [int(size) for size in entry["shape"]]
            start, end = (int(value) for value in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise _corrupt(path, f"tensor {name}: malformed entry {entry!r}") from None
        count = int(np.prod(shape, dtype=np.int64))
        if start < 0 or end > len(body) or end - start != count * dtype.itemsize:
            raise _corrupt(path, f"tensor {name}: bytes {start}..{end} do not hold shape {shape} of {entry['dtype']}")
        tensors[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(shape)
    return tensors, {str(key): str(value) for key, value in metadata.items()}


def save_file(path: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> int:
    """Writes a safetensors file (under a temporary name, then renamed); returns its size."""
    data = encode(tensors, metadata)
    partial = f"{path}.tmp-{os.getpid()}"
    with open(partial, "wb") as handle:
        handle.write(data)
    os.replace(partial, path)
    return len(data)


def load_file(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    with open(path, "rb") as handle:
        return decode(handle.read(), path)
