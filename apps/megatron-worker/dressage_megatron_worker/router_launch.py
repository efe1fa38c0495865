"""Starts the SGLang router the engines register with, with the settings slime's own launch gives it
(`_start_router`, slime/ray/rollout.py:942-954, defaults from slime/backends/sglang_utils/arguments.py
31 and 46). The router outlives the worker (the proxy routes through it), so it is started apart:

    python3 -m dressage_megatron_worker.router_launch --host 0.0.0.0 --port 8000

runs `python3 -m sglang_router.launch_router --host 0.0.0.0 --port 8000` plus the settings below
(`--print` prints the command instead). With sglang-router's defaults a generation is cut after
1,800 s, and the circuit breaker and health checks can mark engines dead while slime pauses them
for a weight update."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Sequence

# (flag, value or None for a switch): what slime sets on RouterArgs before it launches the router.
SLIME_ROUTER_SETTINGS: tuple[tuple[str, str | None], ...] = (
    # --sglang-router-request-timeout-secs defaults to 14400 (arguments.py:31), set at rollout.py:942.
    ("--request-timeout-secs", "14400"),
    # Transient timeouts under load do not mean a dead engine (rollout.py:950).
    ("--disable-circuit-breaker", None),
    # "We will not use the health check from router" (rollout.py:954).
    ("--disable-health-check", None),
    # slime's defaults for the cache-aware policy's load balancing (arguments.py:46).
    ("--balance-abs-threshold", "10"),
    ("--balance-rel-threshold", "1.2"),
)


def router_command(host: str, port: int, python: str = "python3") -> list[str]:
    """The router's command line with slime's settings."""
    command = [python, "-m", "sglang_router.launch_router", "--host", host, "--port", str(port)]
    for flag, value in SLIME_ROUTER_SETTINGS:
        command.extend([flag] if value is None else [flag, value])
    return command


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dressage_megatron_worker.router_launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--python", default="python3", help="the interpreter that has sglang_router")
    parser.add_argument("--print", action="store_true", help="print the command instead of running it")
    options = parser.parse_args(argv)
    command = router_command(options.host, options.port, options.python)
    if options.print:
        print(shlex.join(command), flush=True)
        return 0
    os.execvp(command[0], command)
    return 1  # not reached: execvp replaces this process


if __name__ == "__main__":
    sys.exit(main())
