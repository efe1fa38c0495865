"""Checks that the SGLang router the proxy routes to lists exactly the engines slime pushes weights to:
an engine behind the router that slime does not own would keep serving old weights."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterable

import grpc

from .errors import WorkerError


def _normal(url: str) -> str:
    return url.strip().rstrip("/")


def router_workers(router_url: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """`GET {router}/workers`: every worker the router routes to, as it lists them (`id`, `url`, ...)."""
    with urllib.request.urlopen(f"{_normal(router_url)}/workers", timeout=timeout) as response:
        listing = json.loads(response.read())
    return list(listing.get("workers", []))


def router_worker_urls(router_url: str, timeout: float = 10.0) -> list[str]:
    """The URL of every worker the router routes to."""
    return sorted(_normal(str(worker["url"])) for worker in router_workers(router_url, timeout))


def engine_answers(url: str, timeout: float = 5.0) -> bool | None:
    """Whether an engine answers at `url` (any HTTP status counts): False when nothing listens there
    (refused, unreachable, unknown host: an entry left by an engine that is gone), None when it did not
    answer in time (busy or not: it may still be serving)."""
    # Straight to the engine: an HTTP proxy from the environment would answer for a dead one.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{_normal(url)}/health", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except urllib.error.URLError as error:
        if isinstance(error.reason, (TimeoutError, socket.timeout)):
            return None
        return False
    except (TimeoutError, socket.timeout):
        return None
    except OSError:
        return False


def remove_router_worker(router_url: str, worker: dict[str, Any], timeout: float = 10.0) -> None:
    """`DELETE {router}/workers/{id}`, as slime's SGLangEngine.shutdown deregisters its engine."""
    key = urllib.parse.quote(str(worker.get("id") or worker["url"]), safe="")
    request = urllib.request.Request(f"{_normal(router_url)}/workers/{key}", method="DELETE")
    with urllib.request.urlopen(request, timeout=timeout):
        pass


def claim_router(
    router_url: str, engine_urls: Iterable[str], wait_seconds: float = 60.0, probe_timeout: float = 5.0
) -> list[str]:
    """At start: waits until the router lists every engine slime started (sglang-router registers a
    worker in a background job, after answering the engine's POST), then tells stale entries from
    live ones among the workers slime does not own. A stale one (nothing answers at its URL: an
    engine of an earlier run that was never deregistered) is removed from the router; a live one
    would keep serving old weights, so the start is refused. Returns the URLs removed."""
    owned = {_normal(url) for url in engine_urls}
    deadline = time.monotonic() + wait_seconds
    try:
        while True:
            listed = router_workers(router_url)
            missing = owned - {_normal(str(worker["url"])) for worker in listed}
            if not missing:
                break
            if time.monotonic() > deadline:
                raise WorkerError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"the router {router_url} did not list slime's engines {', '.join(sorted(missing))} within "
                    f"{wait_seconds:g} s of their start",
                )
            time.sleep(0.1)
    except OSError as error:
        raise WorkerError(grpc.StatusCode.UNAVAILABLE, f"router {router_url} unreachable: {error}") from error
    removed, live, silent = [], [], []
    for worker in listed:
        url = _normal(str(worker["url"]))
        if url in owned:
            continue
        answers = engine_answers(url, probe_timeout)
        if answers is False:
            remove_router_worker(router_url, worker)
            removed.append(url)
        elif answers is None:
            silent.append(url)
        else:
            live.append(url)
    if live or silent:
        parts = [f"{url} answers" for url in live] + [f"{url} did not answer within {probe_timeout:g} s" for url in silent]
        raise WorkerError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the router {router_url} routes to engines slime does not update ({'; '.join(parts)}); they would "
            "serve old weights: remove them from the router or start the router empty (see the worker README, "
            f"Engines){'; removed stale entries: ' + ', '.join(removed) if removed else ''}",
        )
    return removed


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
