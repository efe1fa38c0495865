"""Builds Train streams in Python for the tests (the TypeScript client does this in production)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dressage_megatron_worker.stubs import trainer_pb2


def chunks(fields: dict[str, np.ndarray], samples_per_block: int = 3, **header: Any) -> list[Any]:
    count = int(fields["total_lengths"].size)
    token_total = int(fields["total_lengths"].sum())
    stream = [
        trainer_pb2.TrainChunk(
            header=trainer_pb2.TrainBatchHeader(sample_count=count, token_count=token_total, **header)
        )
    ]
    token_start = response_start = 0
    for start in range(0, count, samples_per_block):
        end = min(count, start + samples_per_block)
        token_end = token_start + int(fields["total_lengths"][start:end].sum())
        response_end = response_start + int(fields["response_lengths"][start:end].sum())
        block = trainer_pb2.SampleBlock(
            sample_count=end - start,
            tokens=fields["tokens"][token_start:token_end].tobytes(),
            loss_masks=fields["loss_masks"][response_start:response_end].tobytes(),
            rollout_log_probs=fields["rollout_log_probs"][response_start:response_end].tobytes(),
        )
        for name in ("total_lengths", "response_lengths", "rollout_ids", "rewards", "raw_rewards",
                     "rollout_mask_sums", "truncated", "sample_indices"):
            setattr(block, name, fields[name][start:end].tobytes())
        stream.append(trainer_pb2.TrainChunk(samples=block))
        token_start, response_start = token_end, response_end
    return stream
