"""Trains the embedded model, or a Hugging Face causal LM (`--model hf:DIRECTORY`, hf_model.py),
with PyTorch behind TrainerService, on one process or several (`torch.distributed`: gloo on CPU,
nccl on GPU). The batch takes the same path as with the slime
actor — `to_rollout_data`, slime's DP schedule, `rank_payloads` — then each rank runs its
micro-batches forward and backward, gradients are summed across ranks (each rank's loss is its
share of the step's loss, so the sum is the single-process gradient), clipped by global norm, and
every rank applies the same Adam step. Rank 0 serves gRPC and drives the others."""

from __future__ import annotations

import datetime
import json
import logging
import math
import multiprocessing
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import torch
import torch.distributed as dist

from .actors import TrainResult
from .dp_schedule import build_dp_schedule
from .embedded_checkpoint import TrainerState, read_trainer_state, write_trainer_state
from .embedded_model import EmbeddedModel
from .errors import WorkerError, invalid
from .finite_checks import require_finite_weights
from .gradient_spike import GradientSpikeClip, check_factor
from .hf_model import model_directory
from .packed_batch import PackedBatch
from .policy_loss import LossOptions, policy_loss, reducer_weights, resolve_options, sft_loss
from .rank_payloads import rank_payloads
from .rollout_data import split_per_sample, to_rollout_data

LOGGER = logging.getLogger("dressage_megatron_worker.torch")
# LossConfig fields the policy loss reads (proto names).
LOSS_FIELDS = tuple(LossOptions.__dataclass_fields__)
BETAS = (0.9, 0.999)
EPSILON = 1e-8
# Gradients are summed across ranks in buckets of at most this many elements (one flat copy of a
# large model's gradients would double their memory).
ALL_REDUCE_BUCKET = 1 << 26
# Summed across ranks; every metric of a step is additive (weights carry the normalizers).
ADDITIVE_METRICS = (
    "loss",
    "pg_loss",
    "pg_clipfrac",
    "ppo_kl",
    "entropy_loss",
    "kl_loss",
    "tis",
    "tis_clipfrac",
    "tis_abs",
    "ois",
    "sft_loss",
)


def next_weight_version(version: str) -> str:
    """A trailing number is incremented (`v7` → `v8`), anything else starts at `1` (as the
    embedded trainer numbers them)."""
    match = re.fullmatch(r"(.*?)(\d+)", version)
    return "1" if match is None else f"{match.group(1)}{int(match.group(2)) + 1}"


@dataclass(frozen=True)
class TorchSettings:
    model_path: str
    processes: int = 1
    threads: int = 0
    temperature: float = 1.0
    learning_rate: float = 1e-3
    max_learning_rate: float = 1.0
    max_gradient_norm: float = 1.0
    max_tokens_per_micro_batch: int = 4096
    engine_urls: tuple[str, ...] = ()
    weights_directory: str | None = None
    abort_all_requests: bool = False
    # "cpu" (gloo between ranks) or "cuda" (one GPU per rank, nccl).
    device: str = "cpu"
    # A Hugging Face model's weights, gradients and Adam moments (the embedded model is float32).
    dtype: str = "float32"


def rank_device(settings: TorchSettings, rank: int) -> torch.device:
    """The rank's device: the CPU, or GPU `rank` (made the current device, as nccl needs)."""
    if settings.device != "cuda":
        return torch.device("cpu")
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def distributed_backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def open_model(settings: TorchSettings, device: torch.device) -> Any:
    """The model `--model` names: `hf:DIRECTORY` a Hugging Face causal LM, else an embedded
    checkpoint. Both offer the surface RankTrainer uses (parameters by name, token ids to input
    slots and output classes, logits at chosen positions, read and write weights)."""
    directory = model_directory(settings.model_path)
    if directory is None:
        if settings.dtype != "float32":
            raise invalid(f"--dtype {settings.dtype} applies to hf: models; the embedded model trains in float32")
        return EmbeddedModel.open(settings.model_path, device)
    from .hf_model import HuggingFaceModel

    return HuggingFaceModel(directory, settings.dtype, device)


def gradient_buckets(parameters: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Consecutive parameters of one dtype, at most ALL_REDUCE_BUCKET elements a bucket (a larger
    parameter alone)."""
    buckets: list[list[torch.Tensor]] = []
    size = 0
    for parameter in parameters:
        if not buckets or size + parameter.numel() > ALL_REDUCE_BUCKET or buckets[-1][0].dtype != parameter.dtype:
            buckets.append([])
            size = 0
        buckets[-1].append(parameter)
        size += parameter.numel()
    return buckets


class RankTrainer:
    """One rank's model, reference weights and Adam. Every rank holds identical weights."""

    def __init__(self, settings: TorchSettings, rank: int = 0, world: int = 1) -> None:
        self.settings = settings
        self.rank, self.world = rank, world
        self.device = rank_device(settings, rank)
        self.model = open_model(settings, self.device)
        self.weight_version = self.model.weight_version
        # The KL loss's reference (slime's --ref-load): a frozen copy of the weights taken at the
        # first policy-loss step with use_kl_loss, the weights RL starts from (a warm-start's
        # supervised steps come before); a checkpoint carries it. None until then.
        self.reference: dict[str, torch.Tensor] | None = None
        self.optimizer = self._adam(settings.learning_rate)
        # Recent policy-loss gradient norms for LossConfig.clip_grad_spike (identical on every rank:
        # each sees the all-reduced norm).
        self.spike = GradientSpikeClip()

    def _adam(self, learning_rate: float) -> torch.optim.Adam:
        return torch.optim.Adam(list(self.model.parameters.values()), lr=learning_rate, betas=BETAS, eps=EPSILON)

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # --- one step -------------------------------------------------------------------------------

    def capture_reference(self) -> dict[str, torch.Tensor]:
        """The KL reference, frozen from the current weights the first time (a copy on the model's
        device, in its dtype); never changed by a step after."""
        if self.reference is None:
            self.reference = {name: tensor.detach().clone() for name, tensor in self.model.parameters.items()}
            if self.rank == 0:
                LOGGER.info("KL reference frozen from the weights of version %s", self.weight_version)
        return self.reference

    def train(self, payload: dict[str, Any], job: dict[str, Any]) -> dict[str, float]:
        """Runs this rank's share of every step of the batch; returns the summed metrics."""
        options: LossOptions = job["options"]
        sft = job["loss_type"] == "sft_loss"
        for group in self.optimizer.param_groups:
            group["lr"] = job["learning_rate"]
        reference = self.capture_reference() if not sft and options.use_kl_loss else None
        micro_batches = payload["micro_batch_indices"]
        steps = payload["num_microbatches"]
        per_step = []
        start = 0
        for count in steps:
            per_step.append(micro_batches[start : start + count])
            start += count
        # slime reuses the current logprobs as the old ones only when the rollout trains in one
        # step; with more, the old logprobs are those of the weights before the first step.
        old: dict[int, torch.Tensor] | None = None
        if len(per_step) > 1 and not sft and not options.use_rollout_logprobs:
            old = {}
            with torch.no_grad():
                for indices in micro_batches:
                    prepared = self._prepare(payload, indices, job, 0)
                    if prepared is not None:
                        old[id(indices)] = self._log_probs(prepared, self.model.parameters)[0]
        totals: dict[str, float] = {}
        applied = 0
        self._last_norm = 0.0
        self._skipped = 0
        self._spike_limit: float | None = None
        self._spike_clipped = 0
        parity_sum, parity_max, parity_count = 0.0, 0.0, 0.0
        for step, group in enumerate(per_step):
            # Zeroed gradients on every rank, even one whose micro-batches train nothing: the
            # all-reduce sums every parameter's gradient.
            for parameter in self.model.parameters.values():
                if parameter.grad is None:
                    parameter.grad = torch.zeros_like(parameter)
                else:
                    parameter.grad.zero_()
            sums = dict.fromkeys(ADDITIVE_METRICS, 0.0)
            for indices in group:
                prepared = self._prepare(payload, indices, job, step)
                if prepared is None:
                    continue
                log_probs, entropy = self._log_probs(prepared, self.model.parameters, with_entropy=not sft)
                if sft:
                    loss, metrics = sft_loss(prepared["weights"], log_probs)
                else:
                    ref = None
                    if reference is not None:
                        with torch.no_grad():
                            ref = self._log_probs(prepared, reference)[0]
                    loss, metrics = policy_loss(
                        options,
                        prepared["weights"],
                        log_probs,
                        prepared["advantages"],
                        old_log_probs=None if old is None else old[id(indices)],
                        rollout_log_probs=prepared["rollout"],
                        entropy=entropy if options.entropy_coef != 0 else (None if entropy is None else entropy.detach()),
                        ref_log_probs=ref,
                    )
                    # Parity is measured with the weights before any update: this pass's own in
                    # a single-step batch, the precomputed old logprobs otherwise (every step).
                    if prepared["rollout"] is not None and (step == 0 or old is not None):
                        before = log_probs.detach() if old is None else old[id(indices)]
                        difference = (before - prepared["rollout"]).abs()
                        parity_sum += float(difference.sum())
                        parity_max = max(parity_max, float(difference.max()))
                        parity_count += float(difference.numel())
                loss.backward()
                for name, value in metrics.items():
                    if name in sums:
                        sums[name] += float(value)
            # A step without a trainable token moves nothing (Adam's momentum would otherwise).
            if job["step_tokens"][step] > 0:
                applied += self._apply(sums, None if sft else job.get("clip_grad_spike"), record=not sft)
            for name, value in sums.items():
                totals[name] = totals.get(name, 0.0) + value / len(per_step)
        if self.world > 1:
            reduced = torch.tensor([parity_sum, parity_count], dtype=torch.float64, device=self.device)
            dist.all_reduce(reduced)
            parity_sum, parity_count = float(reduced[0]), float(reduced[1])
            maximum = torch.tensor([parity_max], dtype=torch.float64, device=self.device)
            dist.all_reduce(maximum, op=dist.ReduceOp.MAX)
            parity_max = float(maximum[0])
        result = {name: value for name, value in totals.items() if name in job["reported"]}
        result["optimizer_steps"] = float(applied)
        result["grad_norm"] = self._last_norm
        if self._spike_limit is not None:
            result["grad_spike_limit"] = self._spike_limit
            result["grad_spike_clipped"] = float(self._spike_clipped)
        if self._skipped:
            result["nonfinite_step_skipped"] = float(self._skipped)
        if parity_count > 0:
            result["train_rollout_logprob_abs_diff"] = parity_sum / parity_count
            result["train_rollout_logprob_abs_diff_max"] = parity_max
        return result

    _last_norm = 0.0
    _skipped = 0
    _spike_limit: float | None = None
    _spike_clipped = 0

    def _apply(self, sums: dict[str, float], spike_factor: float | None = None, record: bool = False) -> int:
        """Sums gradients and metrics across ranks, clips (at the fixed norm and, with `spike_factor`,
        at the gradient-spike limit), and steps unless anything is non-finite."""
        parameters = list(self.model.parameters.values())
        if self.world > 1:
            for bucket in gradient_buckets(parameters):
                flat = torch.cat([parameter.grad.reshape(-1) for parameter in bucket])
                dist.all_reduce(flat)
                offset = 0
                for parameter in bucket:
                    size = parameter.numel()
                    parameter.grad.copy_(flat[offset : offset + size].view_as(parameter))
                    offset += size
            values = torch.tensor([sums[name] for name in ADDITIVE_METRICS], dtype=torch.float64, device=self.device)
            dist.all_reduce(values)
            for index, name in enumerate(ADDITIVE_METRICS):
                sums[name] = float(values[index])
        squares = torch.stack([parameter.grad.double().pow(2).sum() for parameter in parameters]).sum()
        norm = float(torch.sqrt(squares))
        self._last_norm = norm
        # A NaN or infinite loss or gradient would turn every weight and Adam's moments into NaN:
        # the step is skipped on every rank alike (they all see the same sums).
        if not (math.isfinite(norm) and math.isfinite(sums["loss"])):
            self._skipped += 1
            LOGGER.warning("step skipped: loss %s and gradient norm %s are not both finite", sums["loss"], norm)
            return 0
        limit = self.settings.max_gradient_norm if self.settings.max_gradient_norm > 0 else math.inf
        spike_limit = None if spike_factor is None else self.spike.limit(spike_factor)
        if spike_limit is not None:
            self._spike_limit = spike_limit
            self._spike_clipped = 1 if norm > spike_limit and spike_limit < limit else 0
            limit = min(limit, spike_limit)
        if norm > limit:
            scale = limit / (norm + 1e-6)
            for parameter in parameters:
                parameter.grad.mul_(scale)
        self.optimizer.step()
        if record:
            self.spike.record(norm)
        return 1

    def _prepare(self, payload: dict[str, Any], indices: list[int], job: dict[str, Any], step: int) -> dict[str, Any] | None:
        """A micro-batch in padded form, restricted to trainable tokens: row r, position p − 1
        predicts token p; response token j of a sample sits at p = total − response + j."""
        rows = [i for i in indices if int(payload["trainable"][i]) > 0]
        if not rows:
            return None
        lengths = [int(payload["tokens"][i].numel()) for i in rows]
        length = max(lengths) - 1
        slots = np.zeros((len(rows), length), dtype=np.int64)
        targets = []
        flat = []
        advantages, rollout, weights = [], [], []
        has_rollout = "rollout_log_probs" in payload
        for row, index in enumerate(rows):
            tokens = payload["tokens"][index].numpy()
            total, response = lengths[row], int(payload["response_lengths"][index])
            slots[row, : total - 1] = self.model.slots_of(tokens[:-1])
            mask = payload["loss_masks"][index].numpy().astype(bool)
            positions = np.nonzero(mask)[0] + (total - response) - 1
            flat.append(row * length + positions)
            targets.append(self.model.output_classes_of(tokens[positions + 1]))
            advantages.append(np.full(positions.size, float(payload["rewards"][index])))
            weights.append(payload["weights"][index][mask])
            if has_rollout:
                rollout.append(payload["rollout_log_probs"][index].numpy()[mask])
        dtype, device = torch.float32, self.device
        return {
            "slots": torch.from_numpy(slots).to(device),
            "flat": torch.from_numpy(np.concatenate(flat)).to(device),
            "targets": torch.from_numpy(np.concatenate(targets)).to(device),
            "advantages": torch.tensor(np.concatenate(advantages), dtype=dtype, device=device),
            "weights": torch.tensor(np.concatenate(weights), dtype=dtype, device=device),
            "rollout": torch.tensor(np.concatenate(rollout), dtype=dtype, device=device) if has_rollout else None,
        }

    def _log_probs(
        self, prepared: dict[str, Any], params: dict[str, torch.Tensor], with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # float32 logprobs whatever the model's dtype (as slime computes them).
        logits = self.model.selected_logits(prepared["slots"], prepared["flat"], params).float()
        if self.settings.temperature != 1:
            logits = logits / self.settings.temperature
        log_softmax = torch.log_softmax(logits, dim=-1)
        picked = torch.gather(log_softmax, 1, prepared["targets"][:, None])[:, 0]
        entropy = -(log_softmax.exp() * log_softmax).sum(-1) if with_entropy else None
        return picked, entropy

    # --- weights --------------------------------------------------------------------------------

    def load(self, path: str) -> tuple[str, TrainerState | None]:
        """Applies the weights, Adam state and KL reference saved in `path` (a checkpoint without a
        reference leaves none: the next `use_kl_loss` step freezes the loaded weights); returns its
        weight version."""
        weights, version = self.model.read(path)
        state = read_trainer_state(path, self.model.specs)
        # A checkpoint of a run that diverged would make every later step NaN: refuse it whole,
        # before anything of it is applied.
        names = [name for name, _ in self.model.specs]
        moments = [] if state is None or state.first_moments is None else [
            *((f"Adam first moment of {name}", values) for name, values in zip(names, state.first_moments)),
            *((f"Adam second moment of {name}", values) for name, values in zip(names, state.second_moments or [])),
        ]
        stored_reference = None if state is None else state.reference
        references = [] if stored_reference is None else [
            (f"KL reference {name}", values) for name, values in zip(names, stored_reference)
        ]
        require_finite_weights(
            [*((f"parameter {name}", values) for name, values in weights.items()), *moments, *references],
            f"LoadCheckpoint refused: the checkpoint in {path} holds a non-finite number",
            "it was saved from weights that had diverged; load an earlier checkpoint",
        )
        self.model.set_weights(weights)
        # Stored as float32; back on the model's device in its dtype (exact for bfloat16 and float16,
        # whose values float32 holds).
        self.reference = None if stored_reference is None else {
            name: torch.from_numpy(np.array(values, dtype=np.float32)).to(self.device, self.model.parameters[name].dtype)
            for name, values in zip(names, stored_reference)
        }
        self.optimizer = self._adam(state.learning_rate if state is not None else self.settings.learning_rate)
        self.spike = GradientSpikeClip(state.gradient_norms if state is not None else [])
        if state is not None and state.first_moments is not None:
            for (name, _), first, second in zip(self.model.specs, state.first_moments, state.second_moments or []):
                parameter = self.model.parameters[name]
                self.optimizer.state[parameter] = {
                    "step": torch.tensor(float(state.iterations)),
                    "exp_avg": torch.from_numpy(np.array(first, dtype=np.float32)).to(self.device, parameter.dtype),
                    "exp_avg_sq": torch.from_numpy(np.array(second, dtype=np.float32)).to(self.device, parameter.dtype),
                }
        return version, state

    def trainer_state(self, train_steps: int, rollout_id: int, weight_version: str) -> TrainerState:
        state = TrainerState(train_steps, rollout_id, weight_version, self.learning_rate)
        state.gradient_norms = list(self.spike.norms)
        slots = [self.optimizer.state.get(self.model.parameters[name]) for name, _ in self.model.specs]
        if all(slot for slot in slots):
            iterations = int(float(slots[0]["step"]))
            state.iterations = iterations
            # tfjs's Adam keeps β^(t+1) after t steps (its running products start at β): written
            # in its convention, so the embedded trainer resuming this state corrects the same way.
            state.beta_powers = (BETAS[0] ** (iterations + 1), BETAS[1] ** (iterations + 1))
            state.first_moments = [slot["exp_avg"].float().cpu().numpy() for slot in slots]
            state.second_moments = [slot["exp_avg_sq"].float().cpu().numpy() for slot in slots]
        if self.reference is not None:
            state.reference = [self.reference[name].float().cpu().numpy() for name, _ in self.model.specs]
        return state


def _worker_main(rank: int, world: int, init_method: str, settings: TorchSettings) -> None:
    """Ranks 1..N-1: follow rank 0's commands until it says stop (or goes away)."""
    if settings.threads > 0:
        torch.set_num_threads(settings.threads)
    device = rank_device(settings, rank)
    dist.init_process_group(
        distributed_backend(device), init_method=init_method, rank=rank, world_size=world, timeout=datetime.timedelta(hours=2)
    )
    trainer = RankTrainer(settings, rank, world)
    try:
        while True:
            command: list[Any] = [None]
            dist.broadcast_object_list(command, src=0)
            kind, argument = command[0]
            if kind == "stop":
                break
            if kind == "train":
                received: list[Any] = [None]
                dist.scatter_object_list(received, None, src=0)
                trainer.train(received[0], argument)
            elif kind == "load":
                trainer.load(argument)
    finally:
        dist.destroy_process_group()


class TorchActor:
    """The TrainingActor of `--actor torch` (see the module doc)."""

    kind = "torch"

    def __init__(self, settings: TorchSettings) -> None:
        if settings.processes < 1:
            raise invalid(f"--processes must be at least 1, got {settings.processes}")
        if not (0 < settings.learning_rate <= settings.max_learning_rate):
            raise invalid(f"--learning-rate must be in (0, {settings.max_learning_rate}], got {settings.learning_rate}")
        if settings.temperature < 0 or not math.isfinite(settings.temperature):
            raise invalid(f"--temperature must be a finite number ≥ 0, got {settings.temperature}")
        # Greedy sampling reports logprobs at temperature 1 (sampling.ts logprobTemperature).
        self.settings = TorchSettings(**{**settings.__dict__, "temperature": settings.temperature if settings.temperature >= 1e-5 else 1.0})
        if settings.threads > 0:
            torch.set_num_threads(settings.threads)
        self.data_parallel_size = settings.processes
        if settings.device not in ("cpu", "cuda"):
            raise invalid(f"--device must be cpu or cuda, got {settings.device!r}")
        if settings.device == "cuda" and torch.cuda.device_count() < settings.processes:
            raise WorkerError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"--device cuda needs one GPU per process: {settings.processes} processes, "
                f"{torch.cuda.device_count()} GPUs visible to torch",
            )
        self.backend = f"torch {torch.__version__.split('+')[0]} {settings.device}"
        self._workers: list[Any] = []
        self._rendezvous: str | None = None
        if settings.processes > 1:
            self._start_ranks()
        self.rank = RankTrainer(self.settings, 0, settings.processes)
        self.backend += f", {self.rank.model.description}"
        self.weight_version = self.rank.weight_version
        self.train_steps = 0
        self.rollout_id = 0
        self._published: str | None = None
        self._weights_directory = settings.weights_directory

    def _start_ranks(self) -> None:
        self._rendezvous = tempfile.mkdtemp(prefix="dressage-torch-rendezvous-")
        init_method = f"file://{os.path.join(self._rendezvous, 'store')}"
        context = multiprocessing.get_context("spawn")
        for rank in range(1, self.settings.processes):
            process = context.Process(
                target=_worker_main, args=(rank, self.settings.processes, init_method, self.settings), daemon=True
            )
            process.start()
            self._workers.append(process)
        dist.init_process_group(
            distributed_backend(rank_device(self.settings, 0)),
            init_method=init_method,
            rank=0,
            world_size=self.settings.processes,
            timeout=datetime.timedelta(hours=2),
        )

    def model_limits(self) -> tuple[int, int]:
        """(vocab_size, max_tokens_per_sample) for GetInfo: the model's vocabulary and its context
        length + 1 tokens (a pass reads all but the last), as the embedded trainer says."""
        model = self.rank.model
        return model.vocab_size, model.context_length + 1

    def close(self) -> None:
        if self._workers:
            dist.broadcast_object_list([("stop", None)], src=0)
            for process in self._workers:
                process.join(timeout=10)
                if process.is_alive():
                    process.terminate()
            dist.destroy_process_group()
            self._workers = []
        if self._rendezvous is not None:
            shutil.rmtree(self._rendezvous, ignore_errors=True)
            self._rendezvous = None
        if self._published is not None and self.settings.weights_directory is None:
            shutil.rmtree(os.path.dirname(self._published), ignore_errors=True)

    # --- Train ----------------------------------------------------------------------------------

    def _job(self, header: Any) -> dict[str, Any]:
        loss = header.loss
        loss_type = loss.loss_type if loss.HasField("loss_type") else "policy_loss"
        if loss_type not in ("policy_loss", "sft_loss"):
            raise invalid(f'loss.loss_type: unknown loss type "{loss_type}"; expected policy_loss or sft_loss')
        learning_rate = loss.learning_rate if loss.HasField("learning_rate") else self.settings.learning_rate
        if not (learning_rate > 0 and learning_rate <= self.settings.max_learning_rate):
            raise invalid(
                f"loss.learning_rate must be a positive number ≤ {self.settings.max_learning_rate}, got {learning_rate}"
            )
        options = resolve_options({name: getattr(loss, name) for name in LOSS_FIELDS if loss.HasField(name)})
        reported = {"loss", "sft_loss"} if loss_type == "sft_loss" else {"loss", "pg_loss", "pg_clipfrac", "ppo_kl", "entropy_loss"}
        if loss_type == "policy_loss" and options.use_kl_loss:
            reported.add("kl_loss")
        if loss_type == "policy_loss" and options.use_tis:
            reported |= {"tis", "tis_clipfrac", "tis_abs", "ois"}
        spike = None
        if loss_type == "policy_loss" and loss.HasField("clip_grad_spike"):
            spike = check_factor(loss.clip_grad_spike)
        return {
            "loss_type": loss_type,
            "learning_rate": float(learning_rate),
            "options": options,
            "reported": reported,
            "clip_grad_spike": spike,
        }

    def _check_tokens(self, batch: PackedBatch) -> np.ndarray:
        """Each sample fits the context, trains no first token, every token is one the model reads
        and every trainable token is in the vocabulary (else the model can never produce it:
        misaligned tokens). Checked here, before any rank starts, so a bad batch never leaves a rank
        waiting. Returns trainable counts."""
        model = self.rank.model
        context = model.context_length
        token_ends = np.cumsum(batch.total_lengths, dtype=np.int64)
        response_ends = np.cumsum(batch.response_lengths, dtype=np.int64)
        trainable = np.zeros(batch.sample_count, dtype=np.int64)
        for sample in range(batch.sample_count):
            total, response = int(batch.total_lengths[sample]), int(batch.response_lengths[sample])
            if total - 1 > context:
                raise invalid(
                    f"sample {sample} has {total} tokens, but the model reads at most {context + 1} tokens "
                    f"per sample (context length {context})"
                )
            tokens = batch.tokens[int(token_ends[sample]) - total : int(token_ends[sample])]
            # The embedded model reads any id (unknown ones as one slot); a Hugging Face model's
            # embedding has a row per id it reads.
            unreadable = model.slots_of(tokens[:-1].astype(np.int64)) < 0
            if np.any(unreadable):
                position = int(np.argmax(unreadable))
                raise invalid(
                    f"sample {sample}: token {int(tokens[position])} at position {position} is outside the model's "
                    "input vocabulary"
                )
            mask = batch.loss_masks[int(response_ends[sample]) - response : int(response_ends[sample])]
            trainable[sample] = int(mask.sum())
            if trainable[sample] == 0:
                continue
            if response == total and mask[0] == 1:
                raise invalid(f"sample {sample} trains its first token, which no earlier token predicts")
            trained = tokens[total - response :][mask.astype(bool)]
            outside = model.output_classes_of(trained.astype(np.int64)) < 0
            if np.any(outside):
                position = total - response + int(np.nonzero(mask)[0][int(np.argmax(outside))])
                raise invalid(
                    f"sample {sample}: trainable token {int(tokens[position])} at position {position} is outside "
                    "the model's vocabulary"
                )
        return trainable

    def train(self, rollout_id: int, header: Any, batch: PackedBatch, loss: dict[str, Any]) -> TrainResult:
        if batch.routed_experts is not None:
            # Training without replaying them would silently drop them: the model has no experts.
            raise WorkerError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "routed_experts: the batch carries routed experts (routing replay, R3), which the torch actor "
                "cannot replay: its models have no experts. Turn routing replay off, or train with the slime "
                "actor and --use-rollout-routing-replay",
            )
        job = self._job(header)
        trainable = self._check_tokens(batch)
        if job["loss_type"] == "policy_loss" and job["options"].use_kl_loss and self.rank.reference is None:
            # Checked here, before any rank starts: every rank freezes the same weights.
            self._require_finite_weights("Train", "freeze them as the KL reference")
        rollout_data = to_rollout_data(batch)
        rollouts = len(set(rollout_data["rollout_ids"]))
        global_batch_size = int(header.global_batch_size) or rollouts
        try:
            schedule = build_dp_schedule(
                rollout_data["total_lengths"],
                rollout_data["rollout_ids"],
                # Fewer rollouts than a step (groups lost to retries, say) still train as one step,
                # the reducer dividing by global_batch_size, as the embedded trainer does; slime
                # would refuse the batch.
                global_batch_size=min(global_batch_size, rollouts),
                dp_size=self.data_parallel_size,
                max_tokens_per_micro_batch=self.settings.max_tokens_per_micro_batch,
            )
        except ValueError as error:
            raise invalid(f"the batch cannot be scheduled: {error}") from None
        payloads = rank_payloads(rollout_data, schedule, self.data_parallel_size, torch)
        # The exact denominators the batch carries (float64), not the rescaled float32 slime needs.
        denominators = batch.rollout_mask_sums.astype(np.float64)
        per_token = job["options"].calculate_per_token_loss
        kept = sorted(index for partition in schedule.partitions for index in partition)
        step_of = np.full(batch.sample_count, -1)
        by_rollout: dict[int, int] = {}
        for index, rollout in enumerate(rollout_data["rollout_ids"]):
            by_rollout.setdefault(int(rollout), len(by_rollout))
        for index in kept:
            step_of[index] = by_rollout[int(rollout_data["rollout_ids"][index])] // min(global_batch_size, rollouts)
        step_tokens = np.bincount(step_of[kept], weights=trainable[kept], minlength=len(schedule.num_microbatches))
        job["step_tokens"] = [float(count) for count in step_tokens]
        lengths = batch.response_lengths.astype(np.int64)
        masks = batch.loss_masks.astype(np.float64)
        if per_token:
            normalizers = np.where(step_of >= 0, step_tokens[np.maximum(step_of, 0)], 0.0)
            per_sample = np.divide(1.0, normalizers, out=np.zeros_like(normalizers), where=normalizers > 0)
            weights = masks * np.repeat(per_sample, lengths)
        else:
            weights = reducer_weights(lengths, masks, denominators, False, global_batch_size, 0.0)
        weights_per_sample = split_per_sample(weights, lengths)
        for payload in payloads:
            partition = payload["partition"]
            payload["trainable"] = trainable[partition]
            payload["weights"] = [weights_per_sample[index] for index in partition]
        if self._workers:
            dist.broadcast_object_list([("train", job)], src=0)
            received: list[Any] = [None]
            dist.scatter_object_list(received, payloads, src=0)
        metrics = self.rank.train(payloads[0], job)
        applied = int(metrics.pop("optimizer_steps"))
        self.train_steps += 1
        self.rollout_id = rollout_id
        metrics["tokens"] = float(trainable[kept].sum())
        metrics["learning_rate"] = job["learning_rate"]
        metrics["micro_batches"] = float(sum(len(indices) for indices in schedule.micro_batch_indices))
        metrics["rollouts"] = float(rollouts)
        if len(kept) < batch.sample_count:
            metrics["samples_dropped"] = float(batch.sample_count - len(kept))
        return TrainResult(len(kept), int(trainable[kept].sum()), applied, metrics)

    # --- weights --------------------------------------------------------------------------------

    def _require_finite_weights(self, method: str, what: str) -> None:
        require_finite_weights(
            ((f"parameter {name}", tensor) for name, tensor in self.rank.model.parameters.items()),
            f"{method} refused",
            f"the trainer does not {what} while any weight is not finite (load a checkpoint to recover)",
        )

    def update_weights(self, weight_version: str, engine_urls: list[str]) -> tuple[str, int]:
        """Labels the trained weights (`weight_version`, or the next number) and, for each engine,
        writes them as a checkpoint the engine loads (embedded, or a Hugging Face directory) and
        calls its `/update_weights_from_disk`."""
        version = weight_version or next_weight_version(self.weight_version)
        urls = engine_urls or list(self.settings.engine_urls)
        self._require_finite_weights("UpdateWeights", "publish them to an engine")
        if urls:
            if self._weights_directory is None:
                self._weights_directory = tempfile.mkdtemp(prefix="dressage-torch-weights-")
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", version)
            directory = os.path.join(self._weights_directory, f"weights-{self.train_steps}-{safe}")
            self.rank.model.write(directory, version)
            for url in urls:
                self._update_engine(url, directory, version)
            previous, self._published = self._published, directory
            if previous is not None and previous != directory:
                shutil.rmtree(previous, ignore_errors=True)
        self.weight_version = version
        LOGGER.info("published weight version %s to %d engine(s)", version, len(urls))
        return version, len(urls)

    def _update_engine(self, url: str, model_path: str, version: str) -> None:
        body = json.dumps(
            {"model_path": model_path, "weight_version": version, "abort_all_requests": self.settings.abort_all_requests}
        ).encode()
        request = urllib.request.Request(
            f"{url.rstrip('/')}/update_weights_from_disk", data=body, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                status, text = response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as error:
            raise WorkerError(
                grpc.StatusCode.UNAVAILABLE, f"could not reach the engine at {url} to update its weights: {error}"
            ) from None
        try:
            success = json.loads(text).get("success") is True
        except (json.JSONDecodeError, AttributeError):
            success = False
        if status != 200 or not success:
            code = grpc.StatusCode.INTERNAL if status >= 500 or status == 200 else grpc.StatusCode.FAILED_PRECONDITION
            raise WorkerError(code, f"the engine at {url} refused the weights in {model_path} (HTTP {status}): {text[:500]}")

    def save_checkpoint(self, path: str, rollout_id: int) -> tuple[str, int]:
        if not path:
            raise invalid("SaveCheckpoint needs a path")
        self._require_finite_weights("SaveCheckpoint", "write them")
        size = self.rank.model.write(path, self.weight_version)
        state = self.rank.trainer_state(self.train_steps, rollout_id or self.rollout_id, self.weight_version)
        size += write_trainer_state(path, state, [name for name, _ in self.rank.model.specs])
        return path, size

    def load_checkpoint(self, path: str) -> int:
        if not path:
            raise invalid("LoadCheckpoint needs a path")
        version, state = self.rank.load(path)
        if self._workers:
            dist.broadcast_object_list([("load", path)], src=0)
        self.weight_version = version
        self.train_steps = state.train_steps if state is not None else 0
        self.rollout_id = state.rollout_id if state is not None else 0
        return self.rollout_id
