"""Stand-ins for slime and Ray built from the recorded slime API (slime_api.json) and nothing else:
every callable has the recorded signature (a call that does not bind raises TypeError), Ray actor
handles answer only the recorded remote methods, the training actors hold pickled copies of the
arguments as Ray's do, and each rank's rollout_data is checked against the recorded keys and dtypes
with real torch CPU tensors (`.to()` as slime's actor calls it). A router on loopback lists the
engines the RolloutManager owns, plus any extra worker a test adds."""

from __future__ import annotations

import copy
import http.server
import json
import math
import os
import tempfile
import threading
import types
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

import torch

from dressage_megatron_worker import dp_schedule as port
from dressage_megatron_worker import slime_api

MANIFEST = slime_api.manifest()
TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "float": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
}


def strict(name: str, implementation: Callable[..., Any], calls: list) -> Callable[..., Any]:
    """`implementation` behind the recorded signature of `name`."""
    signature = slime_api.signature(name)

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{name}{signature}: {error}") from None
        bound.apply_defaults()
        calls.append((name, {key: value for key, value in bound.arguments.items() if key != "self"}))
        return implementation(*bound.args, **bound.kwargs)

    call.__signature__ = signature  # type: ignore[attr-defined]
    call.__name__ = name.rsplit(".", 1)[-1].rsplit(":", 1)[-1]
    return call


class Ref:
    """What ray.put returns."""

    def __init__(self, value: Any) -> None:
        self.value = value


def resolve(object_refs: Any) -> Any:
    if isinstance(object_refs, list):
        return [resolve(ref) for ref in object_refs]
    if not isinstance(object_refs, Ref):
        raise TypeError(f"ray.get of {type(object_refs).__name__}, not an ObjectRef")
    return object_refs.value


class RemoteHandle:
    """A Ray actor handle: `handle.method.remote(...)` for the recorded remote methods only."""

    def __init__(self, class_name: str, instance: Any, calls: list) -> None:
        self._class_name = class_name
        self._instance = instance
        self._calls = calls

    def __getattr__(self, method: str) -> Any:
        name = f"{self._class_name}.{method}"
        if name not in MANIFEST["remote_methods"]:
            raise AttributeError(f"{name} is not in the recorded slime API")
        function = strict(name, getattr(type(self._instance), method), self._calls)
        return types.SimpleNamespace(remote=lambda *args, **kwargs: Ref(function(self._instance, *args, **kwargs)))


def check_rank_data(data: Any, dp_rank: int) -> dict[str, Any]:
    """slime's actor side of one rank's rollout_data: recorded keys, types and dtypes, then `.to()`."""
    if not isinstance(data, dict):
        raise TypeError(f"rank {dp_rank}: rollout_data is {type(data).__name__}, not a dict")
    keys = MANIFEST["rollout_data"]["keys"]
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise KeyError(f"rank {dp_rank}: rollout_data keys {unknown} are not in the recorded slime API")
    missing = sorted(key for key, spec in keys.items() if spec.get("required") and key not in data)
    if missing:
        raise KeyError(f"rank {dp_rank}: rollout_data lacks {missing}")
    moved: dict[str, Any] = {}
    for key, value in data.items():
        spec = keys[key]
        kind = spec["type"]
        if kind in ("list[tensor]", "tensor"):
            # A key without a recorded dtype keeps the one it arrives in (slime: dtype None).
            dtype = getattr(torch, spec["dtype"]) if "dtype" in spec else None
            items = value if kind == "list[tensor]" else [value]
            if kind == "list[tensor]" and not isinstance(value, list):
                raise TypeError(f"rank {dp_rank}: {key} is {type(value).__name__}, not a list of tensors")
            for item in items:
                if not isinstance(item, torch.Tensor) or (dtype is not None and item.dtype != dtype) or item.device.type != "cpu":
                    raise TypeError(f"rank {dp_rank}: {key} holds {type(item).__name__} {getattr(item, 'dtype', '')}, not a CPU {dtype} tensor")
            moved_items = [item.to(device="cpu", dtype=dtype or item.dtype, non_blocking=True) for item in items]
            moved[key] = moved_items if kind == "list[tensor]" else moved_items[0]
        else:
            inner = kind[len("list[") : -1]
            if not isinstance(value, list):
                raise TypeError(f"rank {dp_rank}: {key} is {type(value).__name__}, not a list")
            if inner == "list[int]":
                ok = all(isinstance(item, list) and all(TYPE_CHECKS["int"](x) for x in item) for item in value)
            else:
                ok = all(TYPE_CHECKS[inner](item) for item in value)
            if not ok:
                raise TypeError(f"rank {dp_rank}: {key} is not a {kind}")
            moved[key] = value
    if "partition" in moved:
        count = len(moved["partition"])
        for key, spec in keys.items():
            if key in moved and not spec.get("whole_batch") and key not in ("partition", "micro_batch_indices"):
                length = len(moved[key])
                if length != count:
                    raise ValueError(f"rank {dp_rank}: {key} has {length} entries for {count} samples")
    return moved


# What the training nodes have: slime, Ray, torch; not this package (Ray ships the worker's class).
ABSENT_ON_NODES = ("dressage_megatron_worker",)


def _absent(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in ABSENT_ON_NODES


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _code_names(constant)
    return names


def _needs_import(value: Any) -> str | None:
    """The module a node must import to unpickle `value` by reference, as cloudpickle pickles a
    module, or a function or class that is importable by its qualified name."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    if isinstance(value, (type, types.FunctionType)) and "<locals>" not in value.__qualname__:
        return value.__module__
    return None


def ship_by_value(cls: type) -> type:
    """The actor class as a training node gets it from Ray (cloudpickle): a class defined inside a
    function is not importable, so it travels by value, and its methods with the globals they name
    copied; a global that is importable (a module, a module-level function or class) travels by
    reference and is imported on the node. Anything of a package the nodes lack fails there, as
    ModuleNotFoundError; a global the methods do not name is not there at all."""
    if "<locals>" not in cls.__qualname__ and _absent(cls.__module__):
        # Importable by name: pickled by reference, imported on the node.
        raise ModuleNotFoundError(f"No module named {cls.__module__.split('.')[0]!r} (actor class {cls.__qualname__})")
    shipped = type(cls.__name__, cls.__bases__, {})
    for name, member in vars(cls).items():
        if name in ("__dict__", "__weakref__"):
            continue
        if isinstance(member, types.FunctionType):
            captured = {"__builtins__": member.__globals__.get("__builtins__", __builtins__)}
            for global_name in _code_names(member.__code__):
                if global_name in member.__globals__:
                    value = member.__globals__[global_name]
                    module = _needs_import(value)
                    if _absent(module):
                        raise ModuleNotFoundError(
                            f"No module named {module.split('.')[0]!r} ({cls.__qualname__}.{name} refers to {global_name})"
                        )
                    captured[global_name] = value
            cells = []
            for free, cell in zip(member.__code__.co_freevars, member.__closure__ or ()):
                if free == "__class__":
                    # super() in the shipped class means the shipped class (cloudpickle rebinds it too).
                    cells.append(types.CellType(shipped))
                    continue
                module = _needs_import(cell.cell_contents)
                if _absent(module):
                    raise ModuleNotFoundError(f"No module named {module.split('.')[0]!r} ({cls.__qualname__}.{name} refers to {free})")
                cells.append(cell)
            member = types.FunctionType(member.__code__, captured, member.__name__, member.__defaults__, tuple(cells) or None)
        if name not in ("__module__", "__qualname__", "__doc__"):
            setattr(shipped, name, member)
    return shipped


class Box:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def inner(self) -> Any:
        return self._inner


def _http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read()
    return json.loads(text) if text else None


def _serve(handler: type) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    ip, port = server.server_address[:2]
    return server, f"http://{ip}:{port}"


class _Quiet(http.server.BaseHTTPRequestHandler):
    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


class Engine:
    """slime's SGLangEngine with its SGLang server on loopback: `GET /health` (SGLang runs a
    one-token generation for it, so a paused engine does not answer 200) and
    `GET /get_weight_version`. It registers itself with the router when it starts
    (sglang_engine.py:195); its shutdown deregisters it by the id the router lists (:309) and kills
    the server, after which nothing answers at its URL. `kill()` is a crash: the server goes,
    the router entry stays."""

    def __init__(self) -> None:
        self.version = 0
        self.paused = False
        self.router: str | None = None
        self.external = False
        self.shut_down = False
        engine = self

        class Handler(_Quiet):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/health":
                    self._answer(503 if engine.paused else 200, {})
                elif self.path == "/get_weight_version":
                    self._answer(200, {"weight_version": str(engine.version)})
                else:
                    self.send_error(404)

        self._server, self.url = _serve(Handler)

    def register(self, router: str) -> None:
        self.router = router
        _http("POST", f"{router}/workers", {"url": self.url, "worker_type": "regular"})

    def get_url(self) -> str:
        return self.url

    def get_weight_version(self) -> str:
        return str(self.version)

    def kill(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def shutdown(self) -> None:
        if self.external:
            return
        self.shut_down = True
        for worker in _http("GET", f"{self.router}/workers")["workers"]:
            if worker["url"] == self.url:
                _http("DELETE", f"{self.router}/workers/{worker['id']}")
                break
        self.kill()


class RolloutManager:
    def __init__(self, engines: list[Engine], calls: list) -> None:
        self.engines = engines
        self.handles = [RemoteHandle("slime.backends.sglang_utils.sglang_engine:SGLangEngine", e, calls) for e in engines]
        self.disposed = False

    def get_updatable_engines_and_lock(self) -> tuple:
        count = len(self.handles)
        return self.handles, "lock", 0, [1] * count, list(range(count)), [{}] * count

    def dispose(self) -> None:
        self.disposed = True


class Router:
    """sglang-router's worker API on loopback, as slime and the worker use it: `POST /workers` queues a
    registration and answers 202, the worker is listed once the job has run (`delay` seconds later);
    `GET /workers` lists `{id, url, is_healthy}`; `DELETE /workers/{id}` removes one (404 for an
    unknown id). `static` lists workers registered by others, as before any job of ours.
    With `health_checks` (sglang-router's default; slime's launch and router_launch turn them off)
    a registration waits until the worker answers `GET /health` with 200, and every `interval`
    seconds each worker is probed: `failure_threshold` failures in a row mark it unhealthy,
    `success_threshold` successes healthy again (sglang-router's defaults 3 and 2)."""

    def __init__(
        self,
        static: Callable[[], list[str]] | None = None,
        delay: float = 0.05,
        health_checks: bool = False,
        interval: float = 0.05,
        failure_threshold: int = 3,
        success_threshold: int = 2,
    ) -> None:
        self.registered: dict[str, str] = {}
        self.healthy: dict[str, bool] = {}
        self.removed: list[str] = []
        self.delay = delay
        self.health_checks = health_checks
        self._streaks: dict[str, int] = {}
        self._lock = threading.Lock()
        self._next = 0
        self._stopped = threading.Event()
        router = self

        class Handler(_Quiet):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path != "/workers":
                    self.send_error(404)
                    return
                with router._lock:
                    listed = [
                        {"id": key, "url": url, "is_healthy": router.healthy.get(key, True)}
                        for key, url in router.registered.items()
                    ]
                listed += [{"id": f"static-{i}", "url": url, "is_healthy": True} for i, url in enumerate(static() if static else [])]
                self._answer(200, {"workers": listed, "total": len(listed)})

            def do_POST(self) -> None:  # noqa: N802
                if self.path != "/workers":
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                threading.Timer(router.delay, router._registration_job, args=(body["url"],)).start()
                self._answer(202, {"status": "accepted", "message": f"worker {body['url']} queued"})

            def do_DELETE(self) -> None:  # noqa: N802
                key = urllib.parse.unquote(self.path.removeprefix("/workers/"))
                with router._lock:
                    url = router.registered.pop(key, None)
                if url is None:
                    self._answer(404, {"error": f"worker {key} not found", "code": "WORKER_NOT_FOUND"})
                    return
                router.removed.append(url)
                self._answer(202, {"status": "accepted"})

        self.server, self.url = _serve(Handler)
        self.ip, self.port = self.server.server_address[:2]
        if health_checks:
            self._failures, self._successes = failure_threshold, success_threshold
            threading.Thread(target=self._health_loop, args=(interval,), daemon=True).start()

    @staticmethod
    def _answers_healthy(url: str) -> bool:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def _registration_job(self, url: str) -> None:
        while self.health_checks and not self._answers_healthy(url):
            if self._stopped.wait(0.05):
                return
        self.add(url)

    def _health_loop(self, interval: float) -> None:
        while not self._stopped.wait(interval):
            with self._lock:
                workers = list(self.registered.items())
            for key, url in workers:
                ok = self._answers_healthy(url)
                with self._lock:
                    streak = self._streaks.get(key, 0)
                    streak = max(streak, 0) + 1 if ok else min(streak, 0) - 1
                    self._streaks[key] = streak
                    if streak <= -self._failures:
                        self.healthy[key] = False
                    elif streak >= self._successes:
                        self.healthy[key] = True

    def add(self, url: str) -> None:
        """Runs a registration job: the worker is listed from now on."""
        with self._lock:
            self._next += 1
            self.registered[f"w{self._next}"] = url

    def urls(self) -> list[str]:
        with self._lock:
            return sorted(self.registered.values())

    def health(self) -> dict[str, bool]:
        with self._lock:
            return {url: self.healthy.get(key, True) for key, url in self.registered.items()}

    def close(self) -> None:
        self._stopped.set()
        self.server.shutdown()
        self.server.server_close()


class Slime:
    """The stand-in modules, their call log and state. `importer` serves only recorded modules."""

    def __init__(
        self,
        args: Any,
        engine_count: int = 2,
        extra_router_workers: tuple[str, ...] = (),
        router: Router | None = None,
        node_disks: tuple[str, ...] = (),
    ) -> None:
        self.calls: list = []
        # One folder per training node standing for its local disk: a rank's --save is then on its
        # node's disk, which the driver never sees (empty: shared storage).
        self.node_disks = node_disks
        self.engines = [Engine() for _ in range(engine_count)]
        # A router of its own, or a long-lived one an earlier run used too.
        self.own_router = router is None
        self.router = router or Router()
        # Workers registered before this run (left by an earlier one, or added by someone else).
        for url in extra_router_workers:
            self.router.add(url)
        args.sglang_router_ip, args.sglang_router_port = self.router.ip, self.router.port
        self.args = args
        self.rollout_manager: RemoteHandle | None = None
        self.group: Any = None
        # The global gradient norm of each training step, in order (a step beyond the list: 1.0).
        self.grad_norms: list[float] = []
        self.optimizer_steps = 0
        # slime.observability.logging_utils: whether the driver's run was started, then finished.
        self.tracking: list[str] = []
        self.modules = self._build()

    def close(self) -> None:
        for engine in self.engines:
            engine.kill()
        if self.own_router:
            self.router.close()

    def importer(self, name: str) -> Any:
        if name not in self.modules:
            raise ModuleNotFoundError(f"{name} is not a module of the recorded slime API")
        return self.modules[name]

    def _build(self) -> dict[str, Any]:
        calls = self.calls
        cluster = self

        class Optimizer:
            """Megatron's optimizer as slime's train_one_step uses it; every rank sees one global norm."""

            def __init__(self) -> None:
                self.norms_read = 0

            def prepare_grads(self) -> bool:
                return False

            def get_grad_norm(self) -> float:
                norms = cluster.grad_norms
                return norms[self.norms_read] if self.norms_read < len(norms) else 1.0

            def step(self) -> tuple[bool, float, None]:
                return True, self.get_grad_norm(), None

        class MegatronTrainRayActor:
            """slime's training actor, reduced to what its train() does with rollout_data and to its
            train_one_step's handling of a non-finite gradient (slime_api.json, step_skip)."""

            def init(self, args: Any, rank: int, dp_rank: int, dp_size: int) -> int:
                self.args, self.rank, self.dp_rank, self.dp_size = args, rank, dp_rank, dp_size
                # initialize_model_and_optimizer: a model needs --load (model.py:291), which must hold
                # something (checkpoint.py:101); a Megatron checkpoint resumes at its tracker's
                # iteration, anything else (a Hugging Face model) at 0 (checkpoint.py:122, 140).
                options = vars(args)
                load = options.get("load")
                assert load is not None or options.get("pretrained_checkpoint") is not None
                assert os.path.isdir(load) and os.listdir(load), f"{load=} does not exist or is an empty directory"
                tracker = os.path.join(load, "latest_checkpointed_iteration.txt")
                loaded = int(Path(tracker).read_text()) if os.path.isfile(tracker) else 0
                # The engines' version counter starts at update_weight_start_version (actor.py:183).
                self.weight_updater = types.SimpleNamespace(weight_version=options.get("update_weight_start_version", 0))
                self.received: list[tuple[int, dict[str, Any], Any]] = []
                self.optimizer = Optimizer()
                self.memory_cleared = 0
                # init_wandb_secondary joins the driver's run only when init_tracking set
                # args.wandb_run_id (wandb_utils.py:125); otherwise wandb.log raises at the first step.
                self.wandb_run = vars(args).get("wandb_run_id")
                # get_optimizer_param_scheduler sizes the learning-rate schedule on the actor's own copy
                # of the arguments (slime/backends/megatron_utils/model.py:203): the driver never has it.
                options = vars(args)
                args.train_iters = (
                    options["num_rollout"] * options["rollout_batch_size"] * options["n_samples_per_prompt"]
                ) // options["global_batch_size"]
                return loaded + 1  # actor.py:114

            def clear_memory(self) -> None:
                self.memory_cleared += 1

            def _train_steps(self, steps: int) -> None:
                for _ in range(steps):
                    valid = True
                    if not self.args.check_for_nan_in_loss_and_grad:
                        if self.optimizer.prepare_grads():
                            valid = False
                        else:
                            norm = self.optimizer.get_grad_norm()
                            valid = not (math.isnan(norm) or math.isinf(norm))
                    elif not math.isfinite(self.optimizer.get_grad_norm()):
                        raise RuntimeError("Rank 0: found NaN in local grad norm in backward pass")
                    if valid:
                        self.optimizer.step()
                        if self.rank == 0:
                            cluster.optimizer_steps += 1
                    self.optimizer.norms_read += 1

            def train(self, rollout_id: int, rollout_data_ref: Any, external_data: Any = None) -> None:
                if external_data is not None:
                    raise TypeError(f"the actor role takes no external_data, got {type(external_data).__name__}")
                if not isinstance(rollout_data_ref, list) or len(rollout_data_ref) != self.dp_size:
                    count = len(rollout_data_ref) if isinstance(rollout_data_ref, list) else type(rollout_data_ref).__name__
                    raise AssertionError(f"process_rollout_data: {count} refs for dp_size {self.dp_size}")
                if vars(self.args).get("use_wandb") and self.wandb_run is None:
                    raise RuntimeError("wandb.log: You must call wandb.init() before wandb.log()")
                box = rollout_data_ref[self.dp_rank]
                if not isinstance(box, Box):
                    raise TypeError(f"rollout_data_ref holds {type(box).__name__}, not slime.utils.misc.Box")
                data = check_rank_data(resolve(box.inner), self.dp_rank)
                if vars(self.args).get("use_rollout_routing_replay"):
                    self._fill_routing_replay(data)
                self.received.append((rollout_id, data, copy.deepcopy(self.args)))
                self._train_steps(len(data["global_batch_sizes"]))

            def _fill_routing_replay(self, data: dict[str, Any]) -> None:
                """What train() does first under --use-rollout-routing-replay (actor.py:430):
                fill_routing_replay raises without the key (actor.py:309), and the rows must match
                the tokens (cp_utils.py:266) in slime's (rows, num_layers, topk) shape
                (rollout_data_utils.py:73), read per layer as `experts[:, layer_id]`."""
                if "rollout_routed_experts" not in data:
                    raise ValueError(
                        "rollout_routed_experts is required in rollout_data when use_rollout_routing_replay is set."
                    )
                shape = (int(self.args.num_layers), int(self.args.moe_router_topk))
                for experts, token_ids in zip(data["rollout_routed_experts"], data["tokens"], strict=True):
                    assert experts.shape[0] == token_ids.shape[0] - 1, f"{experts.shape}, {token_ids.shape}"
                    if experts.ndim != 3 or tuple(experts.shape[1:]) != shape:
                        raise ValueError(
                            f"Invalid rollout routed-experts shape for R3: got={tuple(experts.shape)}, expected=(*, {shape[0]}, {shape[1]})."
                        )
                    for layer_id in range(shape[0]):
                        experts[:, layer_id]

            def update_weights(self) -> None:
                # Every rank counts (update_weight_from_distributed.py:108); rank 0 sends the
                # engines the new version with the weights (:345).
                self.weight_updater.weight_version += 1
                if self.rank == 0:
                    for engine in cluster.rollout_manager._instance.engines:
                        engine.version = self.weight_updater.weight_version

            def save_model(self, rollout_id: int, force_sync: bool = False) -> None:
                # Megatron's save_checkpoint writes under the actor's own --save: each rank its shard
                # in iter_NNNNNNN, rank 0 the tracker file naming the latest iteration.
                directory = os.path.join(self.args.save, f"iter_{rollout_id:07d}")
                os.makedirs(directory, exist_ok=True)
                with open(os.path.join(directory, f"rank_{self.rank}.pt"), "wb") as handle:
                    handle.write(b"\0" * 128)
                if self.rank == 0:
                    with open(os.path.join(self.args.save, "latest_checkpointed_iteration.txt"), "w") as handle:
                        handle.write(str(rollout_id))

        MegatronTrainRayActor.train = strict(  # type: ignore[method-assign]
            "slime.backends.megatron_utils.actor:MegatronTrainRayActor.train", MegatronTrainRayActor.train, calls
        )

        class RayTrainGroup:
            def __init__(self, args: Any, actor_cls: type, manager: RolloutManager) -> None:
                world = args.actor_num_nodes * args.actor_num_gpus_per_node
                dp_size = args.data_parallel_size
                self.args = args
                self.manager = manager
                self.actors = []
                shipped = ship_by_value(actor_cls)
                self.start_rollout_ids = []
                for rank in range(world):
                    actor = shipped()
                    # Ray pickles the arguments into each actor.
                    copied = copy.deepcopy(args)
                    if cluster.node_disks:
                        disk = cluster.node_disks[rank // args.actor_num_gpus_per_node]
                        copied.save = os.path.join(disk, copied.save.lstrip("/"))
                    self.start_rollout_ids.append(actor.init(copied, rank, rank // (world // dp_size), dp_size))
                    self.actors.append(actor)

            def async_train(self, rollout_id: int, rollout_data_ref: Any, external_data: Any = None) -> list:
                return [Ref(actor.train(rollout_id, rollout_data_ref, external_data=external_data)) for actor in self.actors]

            def update_weights(self) -> None:
                if self.actors[0].args.debug_train_only:
                    return
                for actor in self.actors:
                    actor.update_weights()

            def save_model(self, rollout_id: int, force_sync: bool = False) -> list:
                # What each actor's save_model returns (actor_group.py:151-153).
                return [actor.save_model(rollout_id, force_sync=force_sync) for actor in self.actors]

            def clear_memory(self) -> list:
                return [actor.clear_memory() for actor in self.actors]

        for method in ("async_train", "update_weights", "save_model", "clear_memory"):
            setattr(
                RayTrainGroup,
                method,
                strict(f"slime.ray.actor_group:RayTrainGroup.{method}", getattr(RayTrainGroup, method), calls),
            )

        def create_placement_groups(args: Any) -> dict[str, Any]:
            return {"actor": ("pg", [0], [0]), "rollout": ("pg", [1], [1]), "critic": None}

        def create_rollout_manager(args: Any, pg: Any) -> tuple:
            if pg != ("pg", [1], [1]):
                raise TypeError(f"create_rollout_manager takes the rollout placement group, got {pg!r}")
            manager = RolloutManager([] if args.debug_train_only else cluster.engines, calls)
            for engine in manager.engines:
                engine.external = bool(args.rollout_external)
                engine.register(cluster.router.url)
            cluster.rollout_manager = RemoteHandle("slime.ray.rollout:RolloutManager", manager, calls)
            return cluster.rollout_manager, None

        def create_training_models(args: Any, pgs: Any, rollout_manager: Any, actor_cls: Any = None) -> tuple:
            if rollout_manager is None or rollout_manager is not cluster.rollout_manager:
                raise TypeError("create_training_models needs the RolloutManager create_rollout_manager returned")
            cls = actor_cls or MegatronTrainRayActor
            if not issubclass(cls, MegatronTrainRayActor):
                raise TypeError("actor_cls must subclass MegatronTrainRayActor")
            cluster.group = RayTrainGroup(args, cls, rollout_manager._instance)
            # Every actor resumes at the same rollout; the driver takes it unless set (placement_group.py:216-219).
            assert len(set(cluster.group.start_rollout_ids)) == 1
            if vars(args).get("start_rollout_id") is None:
                args.start_rollout_id = cluster.group.start_rollout_ids[0]
            return cluster.group, None

        def build_dp_schedule(args: Any, train_parallel_config: dict, total_lengths: list, *, global_batch_size: int, rollout_indices: list) -> tuple:
            """slime/utils/dp_schedule.py through the worker's port of it (dp_schedule.py), with slime's
            asserts (:136, :151, :172, :178) raised as AssertionError, as slime raises them."""
            keys = slime_api.train_parallel_config_keys()
            if sorted(train_parallel_config) != sorted(keys):
                raise KeyError(f"train_parallel_config keys {sorted(train_parallel_config)}, slime reads {keys}")
            options = vars(args)
            if options["balance_data"]:
                raise NotImplementedError("--balance-data: the FLOPs-balanced schedule is not ported")
            try:
                schedule = port.build_dp_schedule(
                    total_lengths,
                    rollout_indices,
                    global_batch_size=global_batch_size,
                    dp_size=train_parallel_config["dp_size"],
                    max_tokens_per_micro_batch=options["max_tokens_per_gpu"] if options["use_dynamic_batch_size"] else None,
                    micro_batch_size=options["micro_batch_size"],
                    cp_size=train_parallel_config["cp_size"],
                    vpp_size=train_parallel_config["vpp_size"],
                    microbatch_group_size_per_vp_stage=train_parallel_config["microbatch_group_size_per_vp_stage"],
                )
            except ValueError as error:
                raise AssertionError(str(error)) from None
            return schedule.partitions, schedule.micro_batch_indices, schedule.num_microbatches, schedule.global_batch_sizes

        def init_tracking(args: Any, primary: bool = True) -> None:
            if primary:
                # init_wandb_primary (wandb_utils.py:23-24, 79): the run id, or None without --use-wandb.
                args.wandb_run_id = "stand-in-run" if vars(args).get("use_wandb") else None
                cluster.tracking.append("init")

        def finish_tracking(args: Any) -> None:
            cluster.tracking.append("finish")

        def module(**members: Any) -> types.SimpleNamespace:
            return types.SimpleNamespace(**members)

        def wrap(module_name: str, function: Callable[..., Any]) -> Callable[..., Any]:
            return strict(f"{module_name}:{function.__name__}", function, calls)

        box_init = strict("slime.utils.misc:Box", lambda inner: inner, calls)

        class StrictBox(Box):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(box_init(*args, **kwargs))

        return {
            "ray": module(put=strict("ray:put", Ref, calls), get=strict("ray:get", resolve, calls)),
            "torch": torch,
            "slime.ray.placement_group": module(
                create_placement_groups=wrap("slime.ray.placement_group", create_placement_groups),
                create_rollout_manager=wrap("slime.ray.placement_group", create_rollout_manager),
                create_training_models=wrap("slime.ray.placement_group", create_training_models),
            ),
            "slime.backends.megatron_utils.actor": module(MegatronTrainRayActor=MegatronTrainRayActor),
            "slime.utils.dp_schedule": module(build_dp_schedule=wrap("slime.utils.dp_schedule", build_dp_schedule)),
            "slime.utils.misc": module(Box=StrictBox),
            "slime.observability.logging_utils": module(
                init_tracking=wrap("slime.observability.logging_utils", init_tracking),
                finish_tracking=wrap("slime.observability.logging_utils", finish_tracking),
            ),
        }


class StrictArgs(types.SimpleNamespace):
    """slime's argument namespace, readable only for the recorded names: reading another one fails
    loudly (not an AttributeError, which getattr with a default would swallow)."""

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("__") and name not in RECORDED_ARGS:
            raise LookupError(f"args.{name} is not an argument the recorded slime API lists")
        return super().__getattribute__(name)


RECORDED_ARGS = frozenset(MANIFEST["args"]["read"])
# Arguments slime reads that the stand-ins copy behaviour from, but the worker never reads.
STAND_IN_ARGS = frozenset(
    {
        "use_wandb",
        "use_dynamic_batch_size",
        "max_tokens_per_gpu",
        "micro_batch_size",
        "balance_data",
        "num_rollout",
        "rollout_batch_size",
        "n_samples_per_prompt",
    }
)


# A Hugging Face model directory (config.json) for --load: what the actors start from without a checkpoint.
BASE_MODEL = tempfile.mkdtemp(prefix="dressage-stand-in-model-")
with open(os.path.join(BASE_MODEL, "config.json"), "w") as _config:
    _config.write("{}")


def launch_args(**overrides: Any) -> StrictArgs:
    """What slime's parse_args yields for the README's launch (the attributes the worker reads)."""
    values = {
        "actor_num_nodes": 1,
        "actor_num_gpus_per_node": 4,
        "rollout_num_gpus": 4,
        "colocate": False,
        "offload_rollout": False,
        "offload_train": False,
        "debug_train_only": False,
        "debug_rollout_only": False,
        "rollout_external": False,
        "use_critic": False,
        "data_parallel_size": 2,
        "context_parallel_size": 1,
        "virtual_pipeline_model_parallel_size": None,
        "microbatch_group_size_per_vp_stage": None,
        "pipeline_model_parallel_size": 1,
        "global_batch_size": 4,
        "save": None,
        "start_rollout_id": None,
        # What slime_validate_args leaves in args.load for the README's first launch: a model to start from.
        "load": BASE_MODEL,
        "pretrained_checkpoint": None,
        "advantage_estimator": "grpo",
        "eps_clip": 0.2,
        "eps_clip_high": None,
        "eps_clip_c": None,
        "use_tis": False,
        "tis_clip": 2.0,
        "tis_clip_low": 0.0,
        "use_kl_loss": False,
        "kl_loss_coef": 0.0,
        "kl_loss_type": "low_var_kl",
        "kl_coef": 0.0,
        "entropy_coef": 0.01,
        "calculate_per_token_loss": False,
        "lr": 1e-6,
        "use_rollout_logprobs": False,
        "normalize_advantages": False,
        "use_opd": False,
        "custom_advantage_function_path": None,
        "loss_type": "policy_loss",
        "check_for_nan_in_loss_and_grad": False,
        "rollout_top_p": 1.0,
        "release_train": False,
        "use_fault_tolerance": False,
        "use_rollout_routing_replay": False,
        # The model's shape (a MoE model's, for routing replay): --num-layers, --moe-router-topk.
        "num_layers": 3,
        "moe_router_topk": 2,
        # Read by the stand-ins only (the worker may not: StrictArgs refuses them).
        "use_wandb": False,
        "use_dynamic_batch_size": False,
        "max_tokens_per_gpu": None,
        "micro_batch_size": 1,
        "balance_data": False,
        "num_rollout": 200,
        "rollout_batch_size": 32,
        "n_samples_per_prompt": 16,
    }
    unknown = set(overrides) - set(values)
    if unknown:
        raise KeyError(f"not an argument the worker reads: {sorted(unknown)}")
    values.update(overrides)
    # slime_validate_args: --eps-clip-high defaults to --eps-clip (slime/utils/arguments.py:1876).
    if values["eps_clip_high"] is None:
        values["eps_clip_high"] = values["eps_clip"]
    extra = set(values) - RECORDED_ARGS - {"start_rollout_id"} - STAND_IN_ARGS
    if extra:
        raise KeyError(f"arguments missing from the recorded API: {sorted(extra)}")
    return StrictArgs(**values)
