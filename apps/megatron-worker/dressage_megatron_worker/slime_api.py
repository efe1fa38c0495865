"""The slime API the worker relies on (slime_api.json): signatures as `inspect.Signature`, the
rollout_data layout, and the launch-flag rules slime's parse_args enforces."""

from __future__ import annotations

import inspect
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

MANIFEST_PATH = Path(__file__).with_name("slime_api.json")


@lru_cache(maxsize=1)
def manifest() -> dict[str, Any]:
    return json.loads(MANIFEST_PATH.read_text())


def commit() -> str:
    return manifest()["source"]["commit"]


def _entry(name: str) -> dict[str, Any]:
    data = manifest()
    for section in ("callables", "remote_methods"):
        if name in data[section]:
            return data[section][name]
    raise KeyError(f"{name} is not in the recorded slime API ({MANIFEST_PATH.name})")


def signature(name: str) -> inspect.Signature:
    """The recorded signature of `module:Qualified.name`."""
    parameters = []
    for parameter in _entry(name)["parameters"]:
        kind = (
            inspect.Parameter.KEYWORD_ONLY
            if parameter.get("kind") == "keyword_only"
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        default = parameter["default"] if "default" in parameter else inspect.Parameter.empty
        parameters.append(inspect.Parameter(parameter["name"], kind, default=default))
    return inspect.Signature(parameters)


def rollout_data_keys() -> dict[str, dict[str, Any]]:
    return manifest()["rollout_data"]["keys"]


def train_parallel_config_keys() -> list[str]:
    return list(manifest()["train_parallel_config"]["keys"])


def missing_flags(argv: Sequence[str]) -> list[str]:
    """Flags slime's parse_args requires that `argv` lacks: the required ones, one of each
    alternative group, and the model-architecture flags its scripts source from scripts/models."""
    present = {item.split("=", 1)[0] for item in argv if item.startswith("--")}
    rules = manifest()["args"]
    missing = [flag for flag in rules["required_flags"] if flag not in present]
    for group in rules["one_of_flags"]:
        if not any(flag in present for flag in group):
            missing.append(" or ".join(group))
    return missing
