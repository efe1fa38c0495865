"""The stand-ins across processes, for tests that start the worker exactly as its operators do
(`ray job submit`: no stdin, no terminal) and restart it: with `tests/stand_in_site` first on
PYTHONPATH, the worker's `from slime.utils.arguments import parse_args` reaches `parse_args` here,
which parses the launch's slime flags, derives what slime's argument post-processing derives, and
installs the stand-in modules (tests/slime_stand_in.py) for everything the worker imports next.
`python3 -m tests.process_stand_in router` runs a router that outlives the workers (as an operator's
sglang-router does) until SIGTERM; its first stdout line is `router http://127.0.0.1:PORT`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any
from urllib.parse import urlparse

from .slime_stand_in import Router, Slime, launch_args


class RemoteRouter:
    """A router running in another process, as the Slime stand-in addresses it."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.url, self.ip, self.port = url, parsed.hostname, parsed.port

    def add(self, url: str) -> None:
        raise NotImplementedError("workers of others are registered by the router's own process")


def _flags() -> argparse.ArgumentParser:
    """The slime flags the tests' launches use, with slime's and Megatron's defaults."""
    parser = argparse.ArgumentParser(prog="train.py", allow_abbrev=False)
    for flag, kind, default in (
        ("--actor-num-nodes", int, 1),
        ("--actor-num-gpus-per-node", int, 8),
        ("--rollout-num-gpus", int, None),
        ("--rollout-num-gpus-per-engine", int, 1),
        ("--tensor-model-parallel-size", int, 1),
        ("--sglang-router-ip", str, None),
        ("--sglang-router-port", int, None),
        ("--hf-checkpoint", str, None),
        ("--load", str, None),
        ("--ref-load", str, None),
        ("--save", str, None),
        ("--rollout-batch-size", int, None),
        ("--n-samples-per-prompt", int, 1),
        ("--num-rollout", int, None),
        ("--global-batch-size", int, None),
        ("--advantage-estimator", str, "grpo"),
        ("--eps-clip", float, 0.2),
        ("--eps-clip-high", float, None),
        ("--lr", float, 1e-6),
    ):
        parser.add_argument(flag, type=kind, default=default)
    parser.add_argument("--disable-rollout-global-dataset", action="store_true")
    parser.add_argument("--use-tis", action="store_true")
    parser.add_argument("--no-check-for-nan-in-loss-and-grad", dest="check_for_nan_in_loss_and_grad", action="store_false")
    return parser


def parse_args() -> Any:
    """slime's parse_args for the flags above: parsed from sys.argv, then the derivations of
    slime_validate_args (slime/utils/arguments.py:1817-1838: without a Megatron checkpoint in --load,
    a Hugging Face model there or else --ref-load, and rollout 0; :1876 eps_clip_high) and of
    Megatron's validate_args (data-parallel size = GPUs / tensor-parallel size)."""
    flags = _flags().parse_args(sys.argv[1:])
    load = flags.load
    start_rollout_id = None
    load_is_megatron = load is not None and os.path.exists(os.path.join(load, "latest_checkpointed_iteration.txt"))
    load_is_hf = load is not None and os.path.isdir(load) and os.path.exists(os.path.join(load, "config.json"))
    if not load_is_megatron:
        if not load_is_hf:
            load = flags.ref_load
        start_rollout_id = 0
    world = flags.actor_num_nodes * flags.actor_num_gpus_per_node
    args = launch_args(
        actor_num_nodes=flags.actor_num_nodes,
        actor_num_gpus_per_node=flags.actor_num_gpus_per_node,
        rollout_num_gpus=flags.rollout_num_gpus,
        data_parallel_size=world // flags.tensor_model_parallel_size,
        global_batch_size=flags.global_batch_size,
        save=flags.save,
        load=load,
        start_rollout_id=start_rollout_id,
        advantage_estimator=flags.advantage_estimator,
        eps_clip=flags.eps_clip,
        eps_clip_high=flags.eps_clip if flags.eps_clip_high is None else flags.eps_clip_high,
        use_tis=flags.use_tis,
        lr=flags.lr,
        check_for_nan_in_loss_and_grad=flags.check_for_nan_in_loss_and_grad,
        num_rollout=flags.num_rollout,
        rollout_batch_size=flags.rollout_batch_size,
        n_samples_per_prompt=flags.n_samples_per_prompt,
    )
    router = RemoteRouter(f"http://{flags.sglang_router_ip}:{flags.sglang_router_port}")
    engines = (flags.rollout_num_gpus or 0) // flags.rollout_num_gpus_per_engine
    slime = Slime(args, engine_count=engines, router=router)  # type: ignore[arg-type]
    # What the worker imports once the arguments are parsed: the stand-in modules, never others.
    sys.modules.update({name: module for name, module in slime.modules.items() if name != "torch"})
    return args


def serve_router() -> None:
    router = Router()
    print(f"router {router.url}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    router.close()


if __name__ == "__main__":
    if sys.argv[1:] != ["router"]:
        sys.exit("usage: python3 -m tests.process_stand_in router")
    serve_router()
