import hashlib
import json
import os
import shutil
import tempfile
import unittest

import grpc
import numpy as np

from dressage_megatron_worker import safetensors_format
from dressage_megatron_worker.embedded_checkpoint import (
    Checkpoint,
    parameter_specs,
    read_checkpoint,
    write_checkpoint,
)
from dressage_megatron_worker.errors import WorkerError

from .torch_fixtures import VOCABULARY, random_weights, tiny_config


class SafetensorsTest(unittest.TestCase):
    def test_layout_round_trip_and_corruption(self) -> None:
        tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([7], dtype=np.int64)}
        data = safetensors_format.encode(tensors, {"format": "pt"})
        length = int.from_bytes(data[:8], "little")
        self.assertEqual((8 + length) % 8, 0)
        header = json.loads(data[8 : 8 + length])
        self.assertEqual(header["a"], {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})
        self.assertEqual(header["b"], {"dtype": "I64", "shape": [1], "data_offsets": [24, 32]})
        decoded, metadata = safetensors_format.decode(data)
        self.assertEqual(metadata, {"format": "pt"})
        np.testing.assert_array_equal(decoded["a"], tensors["a"])
        np.testing.assert_array_equal(decoded["b"], tensors["b"])
        for broken in (data[:5], data[:-1], b"\xff" * 8 + data[8:]):
            with self.assertRaises(WorkerError) as caught:
                safetensors_format.decode(broken)
            self.assertEqual(caught.exception.code, grpc.StatusCode.DATA_LOSS)


class EmbeddedCheckpointTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory, True)

    def test_round_trip_and_hash(self) -> None:
        config = tiny_config()
        weights = random_weights(config)
        write_checkpoint(self.directory, Checkpoint(config, VOCABULARY, weights, "v3"))
        checkpoint = read_checkpoint(self.directory)
        self.assertEqual((checkpoint.weight_version, checkpoint.config), ("v3", config))
        for name in weights:
            np.testing.assert_array_equal(checkpoint.weights[name], weights[name])
        path = os.path.join(self.directory, "model.safetensors")
        with open(path, "r+b") as handle:
            handle.seek(-3, os.SEEK_END)
            handle.write(b"\x01")
        with self.assertRaises(WorkerError) as caught:
            read_checkpoint(self.directory)
        self.assertEqual(caught.exception.code, grpc.StatusCode.DATA_LOSS)

    def test_reads_the_raw_float32_layout_written_before_safetensors(self) -> None:
        config = {key: value for key, value in tiny_config().items() if key not in ("positionEncoding", "initialization")}
        weights = random_weights(tiny_config())
        parts, tensors, offset = [], [], 0
        for name, shape in parameter_specs(tiny_config(), VOCABULARY.size):
            parts.append(weights[name].tobytes())
            tensors.append({"name": name, "shape": list(shape), "offset": offset, "length": int(weights[name].size)})
            offset += int(weights[name].size)
        data = b"".join(parts)
        with open(os.path.join(self.directory, "embedded-weights.bin"), "wb") as handle:
            handle.write(data)
        manifest = {
            "format": "dressage.embedded.checkpoint/v1",
            "model": config,
            "vocabulary": VOCABULARY.tolist(),
            "weight_version": "old",
            "tensors": tensors,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        with open(os.path.join(self.directory, "embedded-model.json"), "w") as handle:
            json.dump(manifest, handle)
        checkpoint = read_checkpoint(self.directory)
        # Checkpoints from before the choice existed: sinusoidal positions, small initialization.
        self.assertEqual((checkpoint.config["positionEncoding"], checkpoint.weight_version), ("sinusoidal", "old"))
        np.testing.assert_array_equal(checkpoint.weights["output.bias"], weights["output.bias"])


if __name__ == "__main__":
    unittest.main()
