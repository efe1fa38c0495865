import unittest

import numpy as np

from dressage_megatron_worker.errors import WorkerError
from dressage_megatron_worker.packed_batch import BatchAssembler
from dressage_megatron_worker.synthetic import expected_fields, mismatched_fields
from dressage_megatron_worker.stubs import trainer_pb2

from .helpers import chunks


def assemble(stream: list) -> tuple:
    assembler = BatchAssembler()
    for chunk in stream:
        assembler.push(chunk)
    return assembler.finish()


class AssemblerTest(unittest.TestCase):
    def test_reassembles_blocks_field_by_field(self) -> None:
        fields = expected_fields(10, 40, 12, seed=3)
        header, batch = assemble(chunks(fields, batch_id="b", rollout_id=4))
        self.assertEqual((header.batch_id, header.rollout_id), ("b", 4))
        self.assertEqual(mismatched_fields(batch, 10, 40, 12, 3), [])
        self.assertIsNone(batch.teacher_log_probs)

    def test_detects_a_wrong_value(self) -> None:
        fields = expected_fields(10, 40, 12)
        fields["rewards"] = fields["rewards"].copy()
        fields["rewards"][7] += 1
        _, batch = assemble(chunks(fields))
        self.assertEqual(mismatched_fields(batch, 10, 40, 12), ["rewards"])

    def test_rejects_malformed_streams(self) -> None:
        fields = expected_fields(4, 16, 4)
        stream = chunks(fields)
        cases = {
            "sample block before the header": stream[1:],
            "a second header": [stream[0], *stream],
            "header announced": stream[:-1],
        }
        for message, broken in cases.items():
            with self.subTest(message=message), self.assertRaisesRegex(WorkerError, message):
                assemble(broken)
        bad_mask = chunks(fields)
        bad_mask[1].samples.loss_masks = b"\x02" + bad_mask[1].samples.loss_masks[1:]
        with self.assertRaisesRegex(WorkerError, "other than 0 and 1"):
            assemble(bad_mask)
        truncated = chunks(fields)
        truncated[1].samples.tokens = truncated[1].samples.tokens[:-2]
        with self.assertRaisesRegex(WorkerError, "not a whole number"):
            assemble(truncated)

    def test_rejects_an_oversized_header_before_any_block(self) -> None:
        assembler = BatchAssembler(max_batch_tokens=10)
        with self.assertRaises(WorkerError) as caught:
            assembler.push(chunks(expected_fields(4, 16, 4))[0])
        self.assertEqual(caught.exception.code.name, "RESOURCE_EXHAUSTED")

    def test_empty_batch(self) -> None:
        header = trainer_pb2.TrainChunk(header=trainer_pb2.TrainBatchHeader(sample_count=0, token_count=0))
        _, batch = assemble([header])
        self.assertEqual(batch.sample_count, 0)
        self.assertEqual(batch.tokens.dtype, np.dtype("<i4"))


if __name__ == "__main__":
    unittest.main()
