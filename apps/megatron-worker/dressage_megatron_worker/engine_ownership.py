"""Checks that the SGLang router the proxy routes to lists exactly the engines slime pushes weights to:
an engine behind the router that slime does not own would keep serving old weights."""

from __future__ import annotations

import json
import urllib.request
from typing import Iterable

import grpc

from .errors import WorkerError


def _normal(url: str) -> str:
    return url.strip().rstrip("/")


def router_worker_urls(router_url: str, timeout: float = 10.0) -> list[str]:
    """`GET {router}/workers`: the URL of every worker the router routes to."""
    with urllib.request.urlopen(f"{_normal(router_url)}/workers", timeout=timeout) as response:
        listing = json.loads(response.read())
    return sorted(_normal(str(worker["url"])) for worker in listing.get("workers", []))


def ownership_problem(router_urls: Iterable[str], engine_urls: Iterable[str]) -> str | None:
    """None when both sets are equal, else what differs."""
    routed = {_normal(url) for url in router_urls}
    owned = {_normal(url) for url in engine_urls}
    if routed == owned:
        return None
    parts = []
    if routed - owned:
        parts.append(f"routed to but not updated by slime: {', '.join(sorted(routed - owned))}")
    if owned - routed:
        parts.append(f"updated by slime but not routed to: {', '.join(sorted(owned - routed))}")
    return "; ".join(parts)


def require_same_engines(router_url: str, engine_urls: Iterable[str]) -> None:
    engines = list(engine_urls)
    try:
        routed = router_worker_urls(router_url)
    except OSError as error:
        raise WorkerError(grpc.StatusCode.UNAVAILABLE, f"router {router_url} unreachable: {error}") from error
    problem = ownership_problem(routed, engines)
    if problem is not None:
        raise WorkerError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the router {router_url} and slime's engines differ ({problem}); start the router empty and let "
            "slime register its engines (see the worker README, Engines)",
        )
