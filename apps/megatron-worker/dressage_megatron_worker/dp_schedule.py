"""slime's data-parallel schedule (`slime/utils/dp_schedule.py build_dp_schedule` with
`seqlen_balancing.first_fit_pack` and `expand_bins_by_splitting`, read at commit 624b824a8), for
actors that run without slime installed. Pack first, distribute second: samples grouped by rollout
id into steps of `global_batch_size` rollouts (trailing rollouts dropped), each step packed into
micro-batches (first fit under a token cap, or fixed-size chunks), the micro-batch count aligned to
a multiple of the DP size (times the micro-batch group under virtual pipelining) by splitting the
largest bins, then dealt round-robin to the ranks. The
FLOPs-balanced variants (`--balance-data`, `--balance-by-flops`) are not ported."""

from __future__ import annotations

from typing import Sequence

from .rank_payloads import DataParallelSchedule


def first_fit_pack(lengths: Sequence[int], max_tokens_per_bin: int) -> list[list[int]]:
    bins: list[list[int]] = []
    sums: list[int] = []
    for index, length in enumerate(lengths):
        for bin_index in range(len(bins)):
            if sums[bin_index] + length <= max_tokens_per_bin:
                bins[bin_index].append(index)
                sums[bin_index] += length
                break
        else:
            bins.append([index])
            sums.append(length)
    return bins


def _split_bin_by_tokens(indices: list[int], lengths: Sequence[int]) -> list[list[int]]:
    halves: list[list[int]] = [[], []]
    sums = [0, 0]
    for index in sorted(indices, key=lambda i: -lengths[i]):
        half = 0 if sums[0] <= sums[1] else 1
        halves[half].append(index)
        sums[half] += lengths[index]
    return halves


def expand_bins_by_splitting(bins: list[list[int]], target_count: int, lengths: Sequence[int]) -> None:
    while len(bins) < target_count:
        candidates = [(sum(lengths[i] for i in members), index) for index, members in enumerate(bins) if len(members) > 1]
        if not candidates:
            break
        _, index = max(candidates)
        left, right = _split_bin_by_tokens(bins[index], lengths)
        bins[index] = left
        bins.append(right)


def build_dp_schedule(
    total_lengths: Sequence[int],
    rollout_indices: Sequence[int],
    *,
    global_batch_size: int,
    dp_size: int,
    max_tokens_per_micro_batch: int | None = None,
    micro_batch_size: int = 1,
    cp_size: int = 1,
    vpp_size: int = 1,
    microbatch_group_size_per_vp_stage: int = 1,
) -> DataParallelSchedule:
    """slime's schedule; dynamic batching when `max_tokens_per_micro_batch` is set (slime's
    `--use-dynamic-batch-size --max-tokens-per-gpu`, a micro-batch holding up to that many tokens
    per context-parallel rank). @raises ValueError where slime asserts (dp_schedule.py:136, 151,
    172, 178): fewer rollouts than one step, fewer samples than ranks in a step, dynamic splitting
    that cannot reach a multiple of the ranks, static micro-batches that are not one."""
    by_rollout: dict[int, list[int]] = {}
    for position, rollout in enumerate(rollout_indices):
        by_rollout.setdefault(int(rollout), []).append(position)
    rollouts = list(by_rollout)
    cap = None if max_tokens_per_micro_batch is None else max_tokens_per_micro_batch * cp_size
    align_to = dp_size * (microbatch_group_size_per_vp_stage if vpp_size > 1 else 1)
    steps = len(rollouts) // global_batch_size
    if steps < 1:
        raise ValueError(f"num_rollouts ({len(rollouts)}) < global_batch_size ({global_batch_size})")
    partitions: list[list[int]] = [[] for _ in range(dp_size)]
    micro_batch_indices: list[list[list[int]]] = [[] for _ in range(dp_size)]
    num_microbatches: list[int] = []
    for step in range(steps):
        members = [p for rollout in rollouts[step * global_batch_size : (step + 1) * global_batch_size] for p in by_rollout[rollout]]
        lengths = [int(total_lengths[i]) for i in members]
        if len(members) < dp_size:
            raise ValueError(f"step {step}: {len(members)} samples < dp_size {dp_size}; each step needs at least one sample per rank")
        if cap is not None:
            bins = first_fit_pack(lengths, cap)
        else:
            bins = [list(range(i, min(i + micro_batch_size, len(lengths)))) for i in range(0, len(lengths), micro_batch_size)]
        target = max(-(-len(bins) // align_to) * align_to, align_to)
        if target != len(bins):
            if cap is None:
                raise ValueError(
                    f"static path: num_mbs ({len(bins)}) is not a multiple of dp_size * mb_group ({align_to}) "
                    f"(step of {len(members)} samples, micro_batch_size {micro_batch_size})"
                )
            expand_bins_by_splitting(bins, target, lengths)
            if len(bins) != target:
                raise ValueError(
                    f"dynamic path: could only produce {len(bins)} mbs after maximal splitting; need {target} "
                    f"(step {step} has {len(members)} samples)"
                )
        per_rank = len(bins) // dp_size
        num_microbatches.append(per_rank)
        for rank in range(dp_size):
            for bin_index in range(rank, len(bins), dp_size):
                start = len(partitions[rank])
                partitions[rank].extend(members[i] for i in bins[bin_index])
                micro_batch_indices[rank].append(list(range(start, start + len(bins[bin_index]))))
    return DataParallelSchedule(partitions, micro_batch_indices, num_microbatches, [global_batch_size] * steps)
