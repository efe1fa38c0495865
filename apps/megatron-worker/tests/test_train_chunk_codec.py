import random
import unittest

from dressage_megatron_worker.errors import WorkerError
from dressage_megatron_worker.packed_batch import BatchAssembler
from dressage_megatron_worker.stubs import trainer_pb2
from dressage_megatron_worker.synthetic import expected_fields, mismatched_fields
from dressage_megatron_worker.train_chunk_codec import BLOCK_FIELDS, train_chunk_deserializer

from .helpers import chunks

deserialize = train_chunk_deserializer(trainer_pb2.TrainBatchHeader)


def random_block(rng: random.Random) -> trainer_pb2.SampleBlock:
    block = trainer_pb2.SampleBlock(sample_count=rng.choice([0, rng.randrange(300), rng.randrange(2**32)]))
    for name in BLOCK_FIELDS.values():
        # Often empty (the field is then absent on the wire), sometimes long enough for a 3-byte length.
        length = rng.choice([0, 0, rng.randrange(300), rng.randrange(16_000, 17_000)])
        setattr(block, name, rng.randbytes(length))
    return block


class TrainChunkCodecTest(unittest.TestCase):
    def test_reads_random_blocks_like_the_generated_codec(self) -> None:
        rng = random.Random(7)
        for _ in range(200):
            expected = random_block(rng)
            chunk = deserialize(trainer_pb2.TrainChunk(samples=expected).SerializeToString())
            self.assertEqual(chunk.WhichOneof("payload"), "samples")
            self.assertEqual(chunk.samples.sample_count, expected.sample_count)
            for name in BLOCK_FIELDS.values():
                self.assertEqual(bytes(getattr(chunk.samples, name)), getattr(expected, name), name)

    def test_reads_the_header_and_views_the_message_without_copying(self) -> None:
        header = trainer_pb2.TrainBatchHeader(batch_id="b", rollout_id=4, sample_count=2, token_count=9)
        chunk = deserialize(trainer_pb2.TrainChunk(header=header).SerializeToString())
        self.assertEqual((chunk.WhichOneof("payload"), chunk.header), ("header", header))
        message = trainer_pb2.TrainChunk(samples=trainer_pb2.SampleBlock(tokens=b"abcd")).SerializeToString()
        tokens = deserialize(message).samples.tokens
        self.assertIsInstance(tokens, memoryview)
        self.assertIs(tokens.obj, message)
        self.assertIsNone(deserialize(b"").WhichOneof("payload"))

    def test_skips_unknown_fields_and_rejects_truncated_messages(self) -> None:
        block = trainer_pb2.SampleBlock(sample_count=3, tokens=b"xyz")
        message = trainer_pb2.TrainChunk(samples=block).SerializeToString()
        with_unknown = bytes([(9 << 3) | 0, 5, (10 << 3) | 2, 2, 1, 2]) + message
        chunk = deserialize(with_unknown)
        self.assertEqual((chunk.samples.sample_count, bytes(chunk.samples.tokens)), (3, b"xyz"))
        for cut in (1, 3, len(message) - 1):
            with self.assertRaisesRegex(WorkerError, "malformed chunk"):
                deserialize(message[:cut])

    def test_feeds_the_assembler(self) -> None:
        fields = expected_fields(10, 40, 12, seed=3)
        assembler = BatchAssembler()
        for chunk in chunks(fields, batch_id="b"):
            assembler.push(deserialize(chunk.SerializeToString()))
        header, batch = assembler.finish()
        self.assertEqual(header.batch_id, "b")
        self.assertEqual(mismatched_fields(batch, 10, 40, 12, 3), [])
        self.assertIsNone(batch.teacher_log_probs)


if __name__ == "__main__":
    unittest.main()
