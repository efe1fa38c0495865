"""One rollout_data dict per data-parallel rank, as slime's RolloutManager packages them
(`_split_train_data_by_dp`): the samples of the rank's partition, the whole-batch lists, the
micro-batch schedule, and torch CPU tensors of slime's dtypes (`tensorize_rollout_data_for_training`).
Independent of the training backend: any actor that takes slime's layout can use it."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from .slime_api import rollout_data_keys

# Per-sample keys sliced by partition, in slime's order.
SLICED_KEYS = (
    "tokens",
    "response_lengths",
    "rewards",
    "truncated",
    "loss_masks",
    "sample_indices",
    "rollout_ids",
    "rollout_mask_sums",
    "rollout_log_probs",
    "teacher_log_probs",
    "rollout_routed_experts",
)
# Keys every rank receives whole (slime splits them on the train side).
WHOLE_KEYS = ("raw_reward", "total_lengths")


class DataParallelSchedule(NamedTuple):
    """What slime's build_dp_schedule returns: a 4-tuple, unpacked positionally."""

    partitions: list[list[int]]
    micro_batch_indices: list[list[list[int]]]
    num_microbatches: list[int]
    global_batch_sizes: list[int]


def torch_dtypes(torch: Any) -> dict[str, Any]:
    """The manifest's dtype of each tensor key, as torch dtypes."""
    return {
        key: getattr(torch, spec["dtype"]) for key, spec in rollout_data_keys().items() if "dtype" in spec
    }


def _tensor(torch: Any, value: Any, dtype: Any) -> Any:
    # Views of a received message are read-only; torch wants writable memory (slime copies them too).
    array = np.asarray(value)
    if not array.flags.writeable:
        array = array.copy()
    return torch.as_tensor(array, dtype=dtype).contiguous()


def rank_payloads(
    rollout_data: dict[str, Any], schedule: Sequence[Any], data_parallel_size: int, torch: Any
) -> list[dict[str, Any]]:
    """The rollout_data of each DP rank with per-token values as torch CPU tensors."""
    partitions, micro_batch_indices, num_microbatches, global_batch_sizes = schedule
    if len(partitions) != data_parallel_size or len(micro_batch_indices) != data_parallel_size:
        raise ValueError(
            f"the DP schedule has {len(partitions)} partitions for {data_parallel_size} data-parallel ranks"
        )
    dtypes = torch_dtypes(torch)
    payloads = []
    for rank in range(data_parallel_size):
        partition = [int(index) for index in partitions[rank]]
        payload: dict[str, Any] = {"partition": partition}
        for key in SLICED_KEYS:
            if key not in rollout_data:
                continue
            values = rollout_data[key]
            if key == "rollout_mask_sums":
                payload[key] = _tensor(torch, np.asarray(values)[partition], dtypes[key])
            elif key in dtypes:
                payload[key] = [_tensor(torch, values[index], dtypes[key]) for index in partition]
            elif key == "rollout_routed_experts":
                # Tensors in the dtype they come in (slime's dtype None for this key).
                payload[key] = [_tensor(torch, values[index], None) for index in partition]
            else:
                payload[key] = [values[index] for index in partition]
        for key in WHOLE_KEYS:
            payload[key] = list(rollout_data[key])
        payload["global_batch_sizes"] = [int(size) for size in global_batch_sizes]
        payload["num_microbatches"] = [int(count) for count in num_microbatches]
        payload["micro_batch_indices"] = [[int(index) for index in batch] for batch in micro_batch_indices[rank]]
        payloads.append(payload)
    return payloads
