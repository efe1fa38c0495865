"""Trains Megatron through slime's training actors, the way slime's train.py drives them, with
Dressage's batches in place of the RolloutManager's generated ones. Every slime name used here is
recorded in slime_api.json; nothing of slime, Ray or torch is imported before `start()`."""

from __future__ import annotations

import importlib
import logging
import os
import time
from typing import Any, Callable

import grpc

from .actors import TrainResult
from .engine_ownership import claim_router, require_same_engines
from .errors import WorkerError
from .packed_batch import PackedBatch
from .rank_payloads import DataParallelSchedule, rank_payloads
from .rollout_data import to_rollout_data
from .slime_load import missing_model
from .slime_settings import batch_settings, scaled_rewards
from .slime_train_actor import FILES_KEY, SETTINGS_KEY, SKIPPED_KEY, dressage_actor_class


LOGGER = logging.getLogger("dressage_megatron_worker")


def _refuse(message: str) -> WorkerError:
    return WorkerError(grpc.StatusCode.FAILED_PRECONDITION, message)


def launch_problems(args: Any) -> list[str]:
    """Settings under which the worker cannot keep slime's engines serving Dressage's rollouts."""
    problems = []
    if getattr(args, "colocate", False) or getattr(args, "offload_rollout", False):
        problems.append(
            "--colocate/--offload-rollout: Dressage keeps generating while Megatron trains, the engines "
            "need GPUs of their own (--rollout-num-gpus)"
        )
    if getattr(args, "use_critic", False):
        problems.append("--advantage-estimator ppo needs slime's critic, which this worker does not drive")
    if getattr(args, "debug_rollout_only", False):
        problems.append("--debug-rollout-only trains nothing")
    top_p = float(getattr(args, "rollout_top_p", 1.0) or 1.0)
    if top_p != 1.0:
        problems.append(
            f"--rollout-top-p {top_p:g}: slime's loss then needs the engines' top-p token sets "
            "(rollout_top_p_token_ids/offsets), which Dressage's batches do not carry; sample with top_p 1"
        )
    if getattr(args, "release_train", False):
        problems.append(
            "--release-train: slime's train.py recreates the training actors before every step and reloads "
            "them from --save; the worker keeps its actors for the whole run"
        )
    if getattr(args, "use_fault_tolerance", False):
        problems.append(
            "--use-fault-tolerance: slime's health monitor replaces a dead engine by None and restarts it only "
            "from train.py's loop, which the worker does not run; restart the worker instead"
        )
    if not getattr(args, "debug_rollout_only", False):
        model = missing_model(getattr(args, "load", None), getattr(args, "pretrained_checkpoint", None))
        if model:
            problems.append(model)
    if getattr(args, "check_for_nan_in_loss_and_grad", True):
        problems.append(
            "Megatron's NaN check (on by default) raises in the middle of a step and fails the whole Train "
            "call; pass --no-check-for-nan-in-loss-and-grad: slime then skips a step whose gradient is not "
            "finite (no optimizer or learning-rate step) and the worker reports it as nonfinite_step_skipped"
        )
    return problems


class SlimeMegatronActor:
    """Start: placement groups → RolloutManager (which starts and owns the SGLang engines, registered
    with the router at --sglang-router-ip/--sglang-router-port) → training actors of our actor class
    → one weight push, as train.py does. Train: rollout_data → slime's DP schedule over Megatron's
    data-parallel ranks → torch CPU tensors per rank → `async_train` with the batch settings."""

    kind = "megatron"
    backend = "megatron"

    def __init__(self, args: Any, importer: Callable[[str], Any] | None = None) -> None:
        self.args = args
        self._import = importer or importlib.import_module
        self._ray: Any = None
        self._torch: Any = None
        self._rollout_manager: Any = None
        self._actor_model: Any = None
        self._tracking: Any = None
        self.weight_version = ""

    @property
    def data_parallel_size(self) -> int:
        size = getattr(self.args, "data_parallel_size", None)
        if not size:
            raise _refuse("args.data_parallel_size is unset: slime's parse_args (Megatron's validate_args) sets it")
        return int(size)

    @property
    def router_url(self) -> str | None:
        ip, port = getattr(self.args, "sglang_router_ip", None), getattr(self.args, "sglang_router_port", None)
        return f"http://{ip}:{port}" if ip and port else None

    def start(self) -> None:
        problems = launch_problems(self.args)
        if problems:
            raise _refuse("cannot drive slime with these arguments: " + "; ".join(problems))
        self._ray = self._import("ray")
        self._torch = self._import("torch")
        placement = self._import("slime.ray.placement_group")
        base = self._import("slime.backends.megatron_utils.actor").MegatronTrainRayActor
        groups = placement.create_placement_groups(self.args)
        # As train.py does: the driver's run (wandb) starts before the actors copy the arguments;
        # it sets args.wandb_run_id, without which their logging has no run to join.
        self._tracking = self._import("slime.observability.logging_utils")
        self._tracking.init_tracking(self.args)
        self._rollout_manager, _per_epoch = placement.create_rollout_manager(self.args, groups["rollout"])
        self._actor_model, _critic = placement.create_training_models(
            self.args, groups, self._rollout_manager, actor_cls=dressage_actor_class(base)
        )
        if getattr(self.args, "debug_train_only", False):
            # slime starts no engines and its update_weights pushes nothing.
            return
        try:
            self._actor_model.update_weights()
            engines = self._engines()
            if self.router_url is not None:
                removed = claim_router(self.router_url, self._engine_urls(engines))
                if removed:
                    LOGGER.warning("removed stale router entries (no engine answers there): %s", ", ".join(removed))
            self.weight_version = self._common_version(engines)
        except BaseException:
            # Leave no engine of ours registered with a router that outlives this process; the
            # start's own failure is the one reported.
            try:
                self.close()
            except Exception:  # noqa: BLE001
                LOGGER.exception("could not deregister slime's engines after a failed start")
            raise

    def close(self) -> None:
        """Deregisters slime's engines from the router and stops them (SGLangEngine.shutdown, which
        slime's train.py never calls: a restart against the same router would find their URLs), then
        stops the RolloutManager's health monitors and tracking, as train.py does at its end."""
        if self._rollout_manager is not None:
            try:
                engines = [engine for engine in self._engines() if engine is not None]
                self._ray.get([engine.shutdown.remote() for engine in engines])
            finally:
                self._ray.get(self._rollout_manager.dispose.remote())
                self._rollout_manager = None
        if self._tracking is not None:
            self._tracking.finish_tracking(self.args)
            self._tracking = None

    def _require_started(self) -> Any:
        if self._actor_model is None:
            raise WorkerError(grpc.StatusCode.UNAVAILABLE, "the slime actors are not started")
        return self._actor_model

    def _engines(self) -> list[Any]:
        engines, *_ = self._ray.get(self._rollout_manager.get_updatable_engines_and_lock.remote())
        return list(engines)

    def _engine_urls(self, engines: list[Any]) -> list[str]:
        return [url for url in self._ray.get([engine.get_url.remote() for engine in engines]) if url]

    def _versions(self, engines: list[Any]) -> list[str]:
        return [str(version) for version in self._ray.get([engine.get_weight_version.remote() for engine in engines])]

    def _common_version(self, engines: list[Any]) -> str:
        versions = set(self._versions(engines))
        if len(versions) > 1:
            raise WorkerError(grpc.StatusCode.INTERNAL, f"slime's engines serve different weight versions: {sorted(versions)}")
        return versions.pop() if versions else ""

    def split_by_data_parallel(self, rollout_data: dict[str, Any], global_batch_size: int) -> list[dict[str, Any]]:
        """One payload per Megatron DP rank, scheduled by slime's build_dp_schedule (a 4-tuple)."""
        schedule_module = self._import("slime.utils.dp_schedule")
        vpp_size = int(getattr(self.args, "virtual_pipeline_model_parallel_size", None) or 1)
        group_size = getattr(self.args, "microbatch_group_size_per_vp_stage", None) or getattr(
            self.args, "pipeline_model_parallel_size", 1
        )
        config = {
            "dp_size": self.data_parallel_size,
            "cp_size": int(getattr(self.args, "context_parallel_size", 1) or 1),
            "vpp_size": vpp_size,
            "microbatch_group_size_per_vp_stage": int(group_size or 1),
        }
        try:
            schedule = DataParallelSchedule(
                *schedule_module.build_dp_schedule(
                    self.args,
                    config,
                    list(rollout_data["total_lengths"]),
                    global_batch_size=global_batch_size,
                    rollout_indices=list(rollout_data["rollout_ids"]),
                )
            )
        except AssertionError as error:
            # slime asserts what a batch must hold for its schedule (slime/utils/dp_schedule.py:136,
            # 151, 172, 178): the batch cannot be trained as sent, which is the client's to change.
            raise WorkerError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"slime cannot schedule this batch over {config['dp_size']} data-parallel ranks: {error}",
            ) from error
        return rank_payloads(rollout_data, schedule, self.data_parallel_size, self._torch)

    def _check_routed_experts(self, batch: PackedBatch) -> None:
        """Routing replay (R3) as slime's actor takes it: under --use-rollout-routing-replay every
        sample's routed experts, len(tokens) - 1 rows of --num-layers x --moe-router-topk ids
        (actor.py:309, cp_utils.py:266, rollout_data_utils.py:73); without the flag none."""
        replay = bool(getattr(self.args, "use_rollout_routing_replay", False))
        if not replay:
            if batch.routed_experts is not None:
                raise _refuse(
                    "the batch carries routed experts (routing replay) but the worker was started without "
                    "--use-rollout-routing-replay: restart it with the flag, or turn routing replay off in the recipe"
                )
            return
        if batch.routed_experts is None:
            raise WorkerError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "routed_experts: the worker runs with --use-rollout-routing-replay and slime's actor needs "
                "rollout_routed_experts, but the batch carries none; turn routing replay on in the recipe "
                "(training.routing_replay) with a proxy started with --use-rollout-routing-replay",
            )
        shape = (int(self.args.num_layers), int(self.args.moe_router_topk))
        for index, experts in enumerate(batch.routed_experts):
            if tuple(experts.shape[1:]) != shape:
                raise WorkerError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"routed_experts: sample {index} has {experts.shape[1]} layers x {experts.shape[2]} experts, "
                    f"the worker's --num-layers {shape[0]} x --moe-router-topk {shape[1]}",
                )

    def train(self, rollout_id: int, header: Any, batch: PackedBatch, loss: dict[str, Any]) -> TrainResult:
        actor_model = self._require_started()
        self._check_routed_experts(batch)
        if header.loss.HasField("clip_grad_spike"):
            # Megatron's optimizer clips at the fixed --clip-grad it was built with; silently
            # training without the spike clip would be worse than refusing.
            raise _refuse(
                "loss.clip_grad_spike: the slime actor cannot clip gradient spikes (Megatron's optimizer clips "
                "at the fixed --clip-grad it was started with); unset clip_grad_spike, or lower --clip-grad"
            )
        rollout_data = to_rollout_data(batch)
        scale = float(rollout_data.pop("dressage_denominator_scale"))
        if getattr(self.args, "calculate_per_token_loss", False):
            # Per token, slime's reducer is sum_of_token, which never reads rollout_mask_sums
            # (slime/backends/megatron_utils/cp_utils.py:124), and Megatron divides by the step's
            # token count (loss.py:1317, 1365): the loss is already the true one, so nothing is
            # folded (folding s would make loss, gradient norm and clip s times too large).
            scale = 1.0
        settings = batch_settings(self.args, loss, scale)
        rollout_data["rewards"] = scaled_rewards(rollout_data["rewards"], scale)
        global_batch_size = int(self.args.global_batch_size)
        if header.global_batch_size and header.global_batch_size != global_batch_size:
            # Megatron's learning-rate schedule advances by the step's global batch size and was
            # built for --global-batch-size: another value would stretch or shrink it.
            raise _refuse(
                f"global_batch_size {header.global_batch_size} differs from the worker's --global-batch-size "
                f"{global_batch_size}"
            )
        rollouts = len(set(rollout_data["rollout_ids"]))
        if rollouts < global_batch_size:
            raise WorkerError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the batch holds {rollouts} rollouts, fewer than global_batch_size {global_batch_size}",
            )
        payloads = self.split_by_data_parallel(rollout_data, global_batch_size)
        box = self._import("slime.utils.misc").Box
        refs = [box(self._ray.put(payload)) for payload in payloads]
        started = time.monotonic()
        reports = self._ray.get(actor_model.async_train(rollout_id, refs, external_data={SETTINGS_KEY: settings}))
        if not getattr(self.args, "offload_train", False):
            # train.py frees the actors' cached GPU memory after every step (offloading does it otherwise).
            actor_model.clear_memory()
        # Every rank sees the same global gradient norm, hence skips the same steps.
        skipped = max((int(report.get(SKIPPED_KEY, 0)) for report in reports if isinstance(report, dict)), default=0)
        steps = len(payloads[0]["global_batch_sizes"]) if payloads else 0
        metrics = {"denominator_scale": scale, "train_seconds": time.monotonic() - started}
        if skipped:
            metrics["nonfinite_step_skipped"] = float(skipped)
        return TrainResult(batch.sample_count, int(batch.tokens.size), steps - skipped, metrics)

    def update_weights(self, weight_version: str, engine_urls: list[str]) -> tuple[str, int]:
        """Pushes through slime (actor_model.update_weights) and answers the version slime's engines
        report afterwards, with the number of engines whose version moved to it."""
        actor_model = self._require_started()
        if getattr(self.args, "debug_train_only", False):
            raise _refuse("the worker runs with --debug-train-only: slime's update_weights pushes no weights")
        if weight_version:
            raise _refuse(
                f"weight_version {weight_version!r} requested: slime numbers the engines' versions itself "
                "(leave it empty; the response carries the engines' version)"
            )
        engines = self._engines()
        if not engines:
            raise _refuse("slime's RolloutManager has no updatable engines: no weights would be pushed")
        owned = self._engine_urls(engines)
        if engine_urls and sorted(url.rstrip("/") for url in engine_urls) != sorted(url.rstrip("/") for url in owned):
            raise _refuse(f"engine_urls {sorted(engine_urls)} are not slime's engines {sorted(owned)}")
        if self.router_url is not None:
            require_same_engines(self.router_url, owned)
        before = self._versions(engines)
        actor_model.update_weights()
        after = self._versions(engines)
        updated = sum(1 for old, new in zip(before, after) if new != old)
        if updated != len(engines) or len(set(after)) != 1:
            raise WorkerError(
                grpc.StatusCode.INTERNAL,
                f"weights reached {updated} of {len(engines)} engines (versions {before} → {after})",
            )
        self.weight_version = after[0]
        return self.weight_version, updated

    def save_checkpoint(self, path: str, rollout_id: int) -> tuple[str, int]:
        """`rollout_id` counts the rollouts trained, i.e. the id of the next one (as the training
        loop numbers its checkpoints). Megatron saves iteration `rollout_id - 1`, the last rollout
        trained, because slime resumes at the loaded iteration + 1 (actor.py:114): a worker
        restarted with `--load` continues exactly at `rollout_id`. Answers the directory Megatron
        wrote, `--save/iter_NNNNNNN`, and its size as the ranks see it."""
        actor_model = self._require_started()
        save = getattr(self.args, "save", None)
        if not save:
            raise _refuse("the worker was started without --save: Megatron has nowhere to write")
        if rollout_id < 1:
            raise WorkerError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "rollout_id 0: a slime checkpoint follows a trained rollout (rollout_id counts the rollouts trained)",
            )
        iteration = rollout_id - 1
        written = os.path.join(save, f"iter_{iteration:07d}")
        if path and os.path.normpath(path) not in (os.path.normpath(save), os.path.normpath(written)):
            raise _refuse(
                f"Megatron saves under --save {save}; path {path!r} differs (leave path empty, or restart with "
                "--save PATH)"
            )
        reports = actor_model.save_model(iteration, force_sync=True)
        # Each rank lists the files it sees (--save may be a disk of its own node); the union by path
        # is the checkpoint, however its files are spread over the nodes.
        sizes: dict[str, int] = {}
        for report in reports or []:
            for name, size in (report or {}).get(FILES_KEY, {}).items():
                sizes[name] = max(sizes.get(name, 0), int(size))
        return written, sum(sizes.values())

    def load_checkpoint(self, path: str) -> int:
        """slime loads a checkpoint only when its actors start (`--load`): this confirms that the
        actors started from `path` and answers the rollout id they continue at; any other path is
        refused with how to restart the worker."""
        self._require_started()
        load = getattr(self.args, "load", None)
        start = getattr(self.args, "start_rollout_id", None) or 0
        loaded = os.path.join(load, f"iter_{start - 1:07d}") if load and start >= 1 else None
        wanted = os.path.normpath(path) if path else ""
        if loaded is not None and wanted in (os.path.normpath(loaded), os.path.normpath(load)):
            return int(start)
        directory = os.path.dirname(wanted.rstrip("/")) or "PATH"
        started = f"from {loaded}" if loaded is not None else "without a checkpoint of its own (rollout 0)"
        raise _refuse(
            f"slime loads a checkpoint only when its actors start, and these started {started}: restart the "
            f"worker with --load {directory} (its latest_checkpointed_iteration.txt names the iteration) to continue "
            f"from {path or 'PATH'}"
        )
