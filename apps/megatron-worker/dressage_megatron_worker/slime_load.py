"""What slime's actors will load, decided as slime decides it: `slime_validate_args` keeps `--load`
when it holds a Megatron checkpoint (its tracker file) or a Hugging Face model (`config.json`) and
otherwise loads `--ref-load` from rollout 0 (slime/utils/arguments.py:1817-1838); each actor then
asserts it has a model (megatron_utils/model.py:291) in a directory that holds something
(megatron_utils/checkpoint.py:100). The dry run and the worker's start check this before any GPU is
taken, instead of an assertion inside every training actor."""

from __future__ import annotations

import os
from dataclasses import dataclass

TRACKER = "latest_checkpointed_iteration.txt"


@dataclass(frozen=True)
class LoadPlan:
    """`path`: what slime's actors load (None: nothing); `kind`: `megatron`, `hf` or `ref_load`."""

    path: str | None
    kind: str


def plan_load(load: str | None, ref_load: str | None) -> LoadPlan:
    """slime_validate_args' choice, from the flags (where slime is not importable to make it)."""
    if load is not None and os.path.exists(os.path.join(load, TRACKER)):
        return LoadPlan(load, "megatron")
    if load is not None and os.path.isdir(load) and os.path.exists(os.path.join(load, "config.json")):
        return LoadPlan(load, "hf")
    return LoadPlan(ref_load, "ref_load")


def missing_model(load: str | None, pretrained_checkpoint: str | None) -> str | None:
    """The problem when slime's actors would have no model (`load` after slime's post-processing)."""
    if load is not None or pretrained_checkpoint is not None:
        return None
    return (
        "slime would load no model: --load (where given) holds no Megatron checkpoint "
        f"({TRACKER}) nor Hugging Face model (config.json), so slime loads --ref-load, which is not set, "
        "and every training actor would assert at init (slime/backends/megatron_utils/model.py:291); "
        "pass --ref-load (the model's torch_dist checkpoint)"
    )


def absent_load(load: str | None) -> list[str]:
    """A path to load that is absent or empty here (megatron_utils/checkpoint.py:100 asserts it)."""
    if load is not None and not (os.path.isdir(load) and os.listdir(load)):
        return [f"slime would load {load}, which does not exist or is an empty directory here"]
    return []


def describe(load: str | None) -> str:
    """What the actors start from, for the dry run's report."""
    if load is None:
        return "no model"
    tracker = os.path.join(load, TRACKER)
    if os.path.exists(tracker):
        with open(tracker) as handle:
            iteration = handle.read().strip()
        return f"loads {load} (Megatron checkpoint, iteration {iteration}: continues at the next rollout)"
    return f"loads {load} (from rollout 0)"
