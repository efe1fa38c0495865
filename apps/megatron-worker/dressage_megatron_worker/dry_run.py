"""What can be checked of a slime launch before GPU time: slime importable, its arguments parsed (by
slime's own parse_args where importable, else against the recorded API), the GPUs the placement
group will reserve, and the router the engines register with. Prints one JSON object per check
(`name`, `ok`, `detail`); `dressage train --dry-run` reads them."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
from typing import Any, Callable, Sequence
from urllib.parse import urlparse

from . import slime_api
from .engine_ownership import engine_answers, ownership_problem, router_worker_urls
from .slime_actor import launch_problems
from .slime_load import absent_load, describe, plan_load

Check = dict[str, Any]


def _flag(argv: Sequence[str], name: str) -> str | None:
    for index, item in enumerate(argv):
        if item == name and index + 1 < len(argv):
            return argv[index + 1]
        if item.startswith(name + "="):
            return item.split("=", 1)[1]
    return None


def _flag_values(argv: Sequence[str], name: str) -> list[str]:
    if name not in argv:
        return []
    values = []
    for item in argv[argv.index(name) + 1 :]:
        if item.startswith("--"):
            break
        values.append(item)
    return values


def _flag_problems(argv: Sequence[str]) -> list[str]:
    """launch_problems, read from the flags when slime cannot parse them here, with what slime's
    argument post-processing would make of --load and --ref-load."""
    present = set(argv)
    estimator = _flag(argv, "--advantage-estimator")
    plan = plan_load(_flag(argv, "--load"), _flag(argv, "--ref-load"))
    return launch_problems(
        type(
            "Flags",
            (),
            {
                "colocate": "--colocate" in present,
                "offload_rollout": bool({"--offload", "--offload-rollout"} & present),
                "use_critic": estimator == "ppo",
                "debug_rollout_only": "--debug-rollout-only" in present,
                "check_for_nan_in_loss_and_grad": "--no-check-for-nan-in-loss-and-grad" not in present,
                "rollout_top_p": float(_flag(argv, "--rollout-top-p") or 1.0),
                "release_train": "--release-train" in present,
                "use_fault_tolerance": "--use-fault-tolerance" in present,
                "load": plan.path,
                "pretrained_checkpoint": _flag(argv, "--pretrained-checkpoint"),
            },
        )()
    )


def _parse_with_slime(parse_args: Callable[[], Any], argv: Sequence[str]) -> Any:
    saved = sys.argv
    sys.argv = ["train.py", *argv]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return parse_args()
    except SystemExit as error:
        # argparse explains on stderr and exits: keep its last line as the reason.
        lines = errors.getvalue().strip().splitlines()
        raise ValueError(lines[-1] if lines else f"exit {error.code}") from None
    finally:
        sys.argv = saved


def gpu_layout(actor_gpus: int, rollout_gpus: int, external: bool, train_only: bool) -> tuple[int, int]:
    """(GPUs the placement group reserves, of which for the engines), as slime's
    _get_placement_group_layout computes them for a non-colocated launch."""
    if train_only or external:
        return actor_gpus, 0
    return actor_gpus + rollout_gpus, rollout_gpus


def run_checks(
    argv: Sequence[str], router_url: str | None = None, importer: Callable[[str], Any] = importlib.import_module
) -> list[Check]:
    checks: list[Check] = []
    try:
        arguments = importer("slime.utils.arguments")
        checks.append({"name": "slime: importable", "ok": True, "detail": str(getattr(arguments, "__file__", "slime"))})
    except Exception as error:  # noqa: BLE001 - reported as the check's failure
        arguments = None
        checks.append(
            {
                "name": "slime: importable",
                "ok": False,
                "detail": f"{type(error).__name__}: {error} (with {sys.executable}; run the dry run where the worker "
                "starts, with PYTHONPATH to Megatron-LM and slime)",
            }
        )

    parsed: Any = None
    if arguments is not None:
        try:
            parsed = _parse_with_slime(arguments.parse_args, argv)
            # parse_args ran slime's post-processing: parsed.load is what the actors will load.
            load = getattr(parsed, "load", None)
            problems = launch_problems(parsed) + absent_load(load)
            checks.append(
                {
                    "name": "slime: arguments",
                    "ok": not problems,
                    "detail": "; ".join(problems)
                    or f"parsed by slime's parse_args: data-parallel size {getattr(parsed, 'data_parallel_size', '?')}, "
                    f"num_rollout {getattr(parsed, 'num_rollout', '?')}; {describe(load)}",
                }
            )
        except BaseException as error:  # noqa: BLE001 - argparse exits, slime asserts
            checks.append({"name": "slime: arguments", "ok": False, "detail": f"slime's parse_args: {type(error).__name__}: {error}"})
    else:
        missing = slime_api.missing_flags(argv)
        plan = plan_load(_flag(argv, "--load"), _flag(argv, "--ref-load"))
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + _flag_problems(argv)
        problems += absent_load(plan.path)
        if "--num-epoch" in argv and "--disable-rollout-global-dataset" in argv:
            problems.append("--num-epoch needs slime's global dataset: use --num-rollout")
        checks.append(
            {
                "name": "slime: arguments",
                "ok": not problems,
                "detail": "; ".join(problems)
                or f"required flags present (checked against the recorded slime API at {slime_api.commit()[:9]}); "
                f"{describe(plan.path)}",
            }
        )

    def number(attribute: str, flag: str, default: int) -> int:
        value = getattr(parsed, attribute, None) if parsed is not None else _flag(argv, flag)
        return int(value) if value not in (None, "") else default

    external = (
        bool(getattr(parsed, "rollout_external", False))
        if parsed is not None
        else "--rollout-external-engine-addrs" in argv
    )
    train_only = bool(getattr(parsed, "debug_train_only", False)) if parsed is not None else "--debug-train-only" in argv
    actor_gpus = number("actor_num_nodes", "--actor-num-nodes", 1) * number("actor_num_gpus_per_node", "--actor-num-gpus-per-node", 8)
    total, rollout = gpu_layout(actor_gpus, number("rollout_num_gpus", "--rollout-num-gpus", 0), external, train_only)
    checks.append(
        {
            "name": "slime: GPUs",
            "ok": total > 0 and (external or train_only or rollout > 0),
            "detail": f"one placement group of {total} GPUs ({actor_gpus} for Megatron, {rollout} for slime's engines) "
            "must be free in the Ray cluster"
            + ("" if external or train_only or rollout > 0 else "; --rollout-num-gpus is 0: no engine would start"),
        }
    )

    ip = getattr(parsed, "sglang_router_ip", None) if parsed is not None else _flag(argv, "--sglang-router-ip")
    port = getattr(parsed, "sglang_router_port", None) if parsed is not None else _flag(argv, "--sglang-router-port")
    checks.append(_ownership_check(ip, port, router_url, _flag_values(argv, "--rollout-external-engine-addrs") if external else None))
    return checks


def _ownership_check(ip: Any, port: Any, router_url: str | None, external: list[str] | None) -> Check:
    name = "engine: owned by slime"
    if not ip or not port:
        return {
            "name": name,
            "ok": False,
            "detail": "no --sglang-router-ip/--sglang-router-port: slime would start a router of its own, which the "
            "proxy does not route to",
        }
    slime_router = f"http://{ip}:{port}"
    if router_url:
        wanted = urlparse(router_url)
        if (wanted.hostname, wanted.port) != (str(ip).strip("[]"), int(port)):
            return {"name": name, "ok": False, "detail": f"slime registers its engines with {slime_router}, the proxy routes to {router_url}"}
    try:
        routed = router_worker_urls(slime_router)
    except (OSError, ValueError) as error:
        return {"name": name, "ok": False, "detail": f"router {slime_router} unreachable: {error}"}
    if external is not None:
        problem = ownership_problem(routed, [address if "://" in address else f"http://{address}" for address in external])
        if problem:
            return {"name": name, "ok": False, "detail": problem}
        return {"name": name, "ok": True, "detail": f"the router lists exactly the {len(routed)} external engines slime updates"}
    # Before the start slime owns no engine yet: every listed worker is an earlier run's or someone
    # else's. The start removes stale ones and refuses live ones (engine_ownership.claim_router).
    answers = {url: engine_answers(url) for url in routed}
    live = [url for url, answer in answers.items() if answer is not False]
    stale = [url for url, answer in answers.items() if answer is False]
    notes = [f"stale (nothing answers; the start removes it): {', '.join(stale)}"] if stale else []
    if live:
        return {
            "name": name,
            "ok": False,
            "detail": f"router {slime_router} routes to engines slime would not update, which would stop the start: "
            f"{', '.join(live)} (they answer, or did not answer in time); remove them or start the router empty"
            + "".join(f"; {note}" for note in notes),
        }
    return {
        "name": name,
        "ok": True,
        "detail": f"router {slime_router} reachable, {len(routed)} workers listed; slime registers its engines there "
        "and the worker refuses to serve while the router lists any other" + "".join(f"; {note}" for note in notes),
    }


def main(argv: Sequence[str], router_url: str | None) -> int:
    checks = run_checks(argv, router_url)
    for check in checks:
        print(json.dumps(check), flush=True)
    return 0 if all(check["ok"] for check in checks) else 1
