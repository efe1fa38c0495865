"""Compares the recorded slime API (dressage_megatron_worker/slime_api.json) with a slime checkout,
by parsing its source (nothing is imported, so no GPU stack is needed):

    /usr/bin/python3 scripts/check-slime-api.py /path/to/slime

Prints one line per recorded callable and exits 1 on any difference in parameter names, kinds or
defaults, on a rollout_data key the checkout's RolloutManager does not send, or on a tensor dtype
other than slime's."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

MANIFEST = json.loads((Path(__file__).resolve().parent.parent / "dressage_megatron_worker" / "slime_api.json").read_text())


def find_definition(tree: ast.Module, qualified: str) -> ast.AST | None:
    scope: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for part in qualified.split("."):
        found = next(
            (node for node in scope if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == part), None
        )
        if found is None:
            return None
        scope = found.body
    if isinstance(found, ast.ClassDef):
        return next((node for node in found.body if isinstance(node, ast.FunctionDef) and node.name == "__init__"), None)
    return found


def recorded_parameters(function: ast.FunctionDef, skip_self: bool) -> list[dict]:
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    result = []
    for argument, default in zip(positional, defaults):
        entry: dict = {"name": argument.arg}
        if default is not None:
            entry["default"] = ast.literal_eval(default)
        result.append(entry)
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        entry = {"name": argument.arg, "kind": "keyword_only"}
        if default is not None:
            entry["default"] = ast.literal_eval(default)
        result.append(entry)
    return result[1:] if skip_self else result


TORCH_NAMES = {"long": "int64", "int": "int32", "int64": "int64", "int32": "int32", "float": "float32", "float32": "float32"}


def check_dtypes(root: Path) -> int:
    """The recorded tensor dtypes against slime's _ROLLOUT_DATA_TENSOR_DTYPES (rollout.py, or
    observability/rollout_data_utils.py in later commits)."""
    for relative in ("slime/observability/rollout_data_utils.py", "slime/ray/rollout.py"):
        path = root / relative
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "_ROLLOUT_DATA_TENSOR_DTYPES" for target in node.targets
            ):
                source = {
                    ast.literal_eval(key): TORCH_NAMES.get(value.attr) if isinstance(value, ast.Attribute) else None
                    for key, value in zip(node.value.keys, node.value.values)  # type: ignore[attr-defined]
                }
                failures = 0
                for key, spec in MANIFEST["rollout_data"]["keys"].items():
                    if key in source and spec.get("dtype") != source[key]:
                        print(f"DIFFERS  rollout_data {key}: source {source[key]}, recorded {spec.get('dtype')}")
                        failures += 1
                if not failures:
                    print(f"ok       tensor dtypes ({relative})")
                return failures
    print("MISSING  _ROLLOUT_DATA_TENSOR_DTYPES")
    return 1


def main(root: Path) -> int:
    failures = 0
    for section in ("callables", "remote_methods"):
        for name, entry in MANIFEST[section].items():
            if entry.get("not_in_slime"):
                continue
            module, qualified = name.split(":")
            path = root / (module.replace(".", "/") + ".py")
            tree = ast.parse(path.read_text())
            definition = find_definition(tree, qualified)
            if definition is None:
                print(f"MISSING  {name}")
                failures += 1
                continue
            is_class = "." not in qualified and qualified[0].isupper()
            actual = recorded_parameters(definition, skip_self=is_class)  # type: ignore[arg-type]
            if actual != entry["parameters"]:
                print(f"DIFFERS  {name}: source {actual}, recorded {entry['parameters']}")
                failures += 1
            else:
                print(f"ok       {name}")
    rollout = (root / "slime" / "ray" / "rollout.py").read_text()
    for key, spec in MANIFEST["rollout_data"]["keys"].items():
        if f'"{key}"' not in rollout:
            print(f"DIFFERS  rollout_data key {key} is not in slime/ray/rollout.py")
            failures += 1
    for relative, lines in MANIFEST["step_skip"]["source_lines"].items():
        source = (root / relative).read_text()
        for line in lines:
            if line not in source:
                print(f"DIFFERS  {relative} no longer holds: {line}")
                failures += 1
    for behaviour, cited in MANIFEST["cited"]["lines"].items():
        lines = (root / cited["file"]).read_text().splitlines()
        line = lines[cited["line"] - 1].strip() if cited["line"] <= len(lines) else ""
        if line != cited["source"]:
            print(f"DIFFERS  {cited['file']}:{cited['line']} ({behaviour}) reads {line!r}")
            failures += 1
        else:
            print(f"ok       {cited['file']}:{cited['line']} ({behaviour})")
    failures += check_dtypes(root)
    print(f"{failures} difference(s) against {root}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
