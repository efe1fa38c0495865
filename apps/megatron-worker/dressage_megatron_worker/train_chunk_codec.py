"""A zero-copy reader of TrainChunk messages for the Train stream.

The generated codec copies every bytes field of a sample block twice (into the parsed message, then into
a new Python bytes object on each attribute access); sample blocks are nearly all payload, so the
receiving side spent as long parsing as the transfer itself took. Here a block's columns are memoryview
slices of the received message: `BatchAssembler` reads them with `np.frombuffer` and copies each column
once, into the batch. Header chunks (small) still go through the generated codec.
"""

from __future__ import annotations

from typing import Any, Callable

from .errors import invalid

# SampleBlock's bytes fields by field number (field 1 is sample_count); see trainer.proto.
BLOCK_FIELDS = {
    2: "tokens",
    3: "total_lengths",
    4: "response_lengths",
    5: "loss_masks",
    6: "rollout_log_probs",
    7: "rollout_ids",
    8: "rewards",
    9: "raw_rewards",
    10: "rollout_mask_sums",
    11: "truncated",
    12: "sample_indices",
    13: "teacher_log_probs",
    14: "routed_experts",
}

_EMPTY = memoryview(b"")


def _malformed(message: str) -> Exception:
    return invalid(f"train stream: malformed chunk ({message})")


def _varint(data: memoryview, offset: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while shift < 70:
        if offset >= end:
            raise _malformed("truncated varint")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7
    raise _malformed("varint too long")


def _skip(data: memoryview, offset: int, end: int, wire_type: int) -> int:
    if wire_type == 0:
        _, offset = _varint(data, offset, end)
    elif wire_type == 1:
        offset += 8
    elif wire_type == 2:
        length, offset = _varint(data, offset, end)
        offset += length
    elif wire_type == 5:
        offset += 4
    else:
        raise _malformed(f"unsupported wire type {wire_type}")
    if offset > end:
        raise _malformed("field past the end of the message")
    return offset


def _length_delimited(data: memoryview, offset: int, end: int) -> tuple[memoryview, int]:
    length, offset = _varint(data, offset, end)
    if offset + length > end:
        raise _malformed("length past the end of the message")
    return data[offset : offset + length], offset + length


class SampleBlockView:
    """A SampleBlock whose bytes fields are memoryviews into the received message (absent ones empty)."""

    __slots__ = ("sample_count", *BLOCK_FIELDS.values())

    def __init__(self) -> None:
        self.sample_count = 0
        for name in BLOCK_FIELDS.values():
            setattr(self, name, _EMPTY)


class TrainChunkView:
    """The parts of a generated TrainChunk that `BatchAssembler` uses: `WhichOneof`, `header`, `samples`."""

    __slots__ = ("_payload", "header", "samples")

    def __init__(self, payload: str | None, header: Any = None, samples: SampleBlockView | None = None) -> None:
        self._payload = payload
        self.header = header
        self.samples = samples

    def WhichOneof(self, group: str) -> str | None:  # noqa: N802 - the generated messages' name
        return self._payload if group == "payload" else None


def _decode_block(data: memoryview) -> SampleBlockView:
    block = SampleBlockView()
    offset, end = 0, len(data)
    while offset < end:
        tag, offset = _varint(data, offset, end)
        field, wire_type = tag >> 3, tag & 7
        name = BLOCK_FIELDS.get(field)
        if field == 1 and wire_type == 0:
            value, offset = _varint(data, offset, end)
            block.sample_count = value & 0xFFFFFFFF
        elif name is not None and wire_type == 2:
            value_view, offset = _length_delimited(data, offset, end)
            setattr(block, name, value_view)
        else:
            offset = _skip(data, offset, end, wire_type)
    return block


def train_chunk_deserializer(header_type: Any) -> Callable[[bytes], TrainChunkView]:
    """A gRPC request deserializer of TrainChunk; `header_type` is the generated TrainBatchHeader."""

    def deserialize(message: bytes) -> TrainChunkView:
        data = memoryview(message)
        chunk = TrainChunkView(None)
        offset, end = 0, len(data)
        while offset < end:
            tag, offset = _varint(data, offset, end)
            field, wire_type = tag >> 3, tag & 7
            if field == 1 and wire_type == 2:
                body, offset = _length_delimited(data, offset, end)
                chunk = TrainChunkView("header", header=header_type.FromString(bytes(body)))
            elif field == 2 and wire_type == 2:
                body, offset = _length_delimited(data, offset, end)
                chunk = TrainChunkView("samples", samples=_decode_block(body))
            else:
                offset = _skip(data, offset, end, wire_type)
        return chunk

    return deserialize
