"""The torch actor on a GPU host, in one short prepared run (a few minutes), for both models: the
embedded model and a Hugging Face Qwen3 (random weights from a config, nothing downloaded). Needs
torch with CUDA, transformers, numpy and grpcio in the interpreter; from the app's directory:

    python3 scripts/cuda-check.py --device cuda --processes 2 --size 0.6b

Per model it checks that the trainer's logprobs on the device match an independent forward pass
(the embedded model's on the CPU; `transformers`' own on the device) within 1e-4, that a step moves
the weights and keeps them finite, that the Hugging Face directory it writes reloads with
`from_pretrained` to identical tensors, and, with `--processes N` > 1, that N ranks (nccl) give the
weights of one after a step; then it measures Train tokens per second (every token of the batch,
as the CPU benchmark counts them). One JSON line per check; the last line is one JSON object with
every figure. Exits 1 when a check fails. `--device cpu --size tiny` runs the same on any machine."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dressage_megatron_worker.packed_batch import PackedBatch  # noqa: E402
from dressage_megatron_worker.stubs import trainer_pb2  # noqa: E402
from dressage_megatron_worker.torch_actor import TorchActor, TorchSettings  # noqa: E402
from tests.test_hf_actor import direct_logprobs, load_direct, write_tiny_qwen3  # noqa: E402
from tests.torch_fixtures import VOCABULARY, policy_batch, write_tiny_checkpoint  # noqa: E402

# Qwen3-0.6B's shape (its config.json), with random weights.
QWEN3_SHAPES = {
    "tiny": {},
    "0.6b": {
        "vocab_size": 151936,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "initializer_range": 0.02,
    },
}
PARITY_LIMIT = 1e-4
results: dict[str, object] = {}
failed: list[str] = []


def report(name: str, passed: bool | None, **figures: object) -> None:
    """One JSON line; `passed` None is a measurement."""
    line = {"check": name, **({} if passed is None else {"passed": passed}), **figures}
    print(json.dumps(line), flush=True)
    results[name] = figures
    if passed is False:
        failed.append(name)


def header(**loss: object) -> trainer_pb2.TrainBatchHeader:
    return trainer_pb2.TrainBatchHeader(loss=trainer_pb2.LossConfig(learning_rate=1e-4, **loss))


def throughput_batch(ids: np.ndarray, samples: int, total: int, response: int) -> PackedBatch:
    """`samples` sequences of `total` tokens drawn from `ids`, the last `response` trained."""
    generator = np.random.default_rng(7)
    rewards = np.where(np.arange(samples) % 2 == 0, 1.0, -1.0).astype(np.float32)
    return PackedBatch(
        sample_count=samples,
        tokens=generator.choice(ids, samples * total).astype(np.int32),
        total_lengths=np.full(samples, total, dtype=np.int32),
        response_lengths=np.full(samples, response, dtype=np.int32),
        loss_masks=np.ones(samples * response, dtype=np.uint8),
        rollout_log_probs=np.full(samples * response, -1.0, dtype=np.float32),
        teacher_log_probs=None,
        rollout_ids=np.arange(samples, dtype=np.int32),
        rewards=rewards,
        raw_rewards=rewards.copy(),
        rollout_mask_sums=np.full(samples, float(response)),
        truncated=np.zeros(samples, dtype=np.uint8),
        sample_indices=np.arange(samples, dtype=np.int32),
    )


def measure(name: str, actor: TorchActor, batch: PackedBatch, steps: int) -> None:
    actor.train(0, header(), batch, {})  # warm-up: kernels, allocator
    started = time.perf_counter()
    for step in range(steps):
        actor.train(step + 1, header(), batch, {})
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    tokens = int(batch.total_lengths.sum()) * steps
    report(name, None, tokens_per_second=round(tokens / seconds, 1), seconds=round(seconds, 3), steps=steps)


def step_checks(name: str, actor: TorchActor, batch: PackedBatch, exact: bool = True) -> None:
    """Parity with the batch's rollout logprobs (an independent forward pass; a measurement only
    when not `exact`: bfloat16), then weights move and stay finite."""
    before = {key: tensor.detach().clone() for key, tensor in actor.rank.model.parameters.items()}
    metrics = actor.train(1, header(use_tis=True), batch, {}).metrics
    parity = metrics["train_rollout_logprob_abs_diff_max"]
    report(f"{name}/logprob_parity", parity <= PARITY_LIMIT if exact else None, max_abs_diff=parity, limit=PARITY_LIMIT)
    moved = any(not torch.equal(before[key], tensor.detach()) for key, tensor in actor.rank.model.parameters.items())
    finite = all(bool(tensor.isfinite().all()) for tensor in actor.rank.model.parameters.values())
    report(f"{name}/step", moved and finite and math.isfinite(metrics["loss"]), loss=metrics["loss"], grad_norm=metrics["grad_norm"])


def data_parallel(name: str, model_path: str, options: argparse.Namespace, batch: PackedBatch, **settings: object) -> None:
    weights = []
    for processes in (1, options.processes):
        actor = TorchActor(TorchSettings(model_path=model_path, device=options.device, processes=processes, max_tokens_per_micro_batch=64, **settings))
        actor.train(1, header(), batch, {})
        weights.append({key: tensor.detach().float().cpu() for key, tensor in actor.rank.model.parameters.items()})
        actor.close()
    difference = max(float((weights[0][key] - weights[1][key]).abs().max()) for key in weights[0])
    report(f"{name}/data_parallel", difference <= 2e-5, processes=options.processes, max_abs_diff=difference)


def embedded(options: argparse.Namespace, scratch: str) -> None:
    directory = write_tiny_checkpoint(f"{scratch}/embedded")
    batch = policy_batch(samples=16, seed=3)
    # The CPU model's logprobs as the rollout's: the engine runs elsewhere.
    cpu = TorchActor(TorchSettings(model_path=directory))
    ends = np.cumsum(batch.total_lengths)
    own = cpu.rank.model.sequence_logprobs([batch.tokens[end - total : end] for end, total in zip(ends, batch.total_lengths)])
    batch.rollout_log_probs = np.concatenate([row[len(row) - n :] for row, n in zip(own, batch.response_lengths)]).astype(np.float32)
    cpu.close()
    actor = TorchActor(TorchSettings(model_path=directory, device=options.device))
    step_checks("embedded", actor, batch)
    measure("embedded/throughput", actor, throughput_batch(VOCABULARY, 16, 32, 16), options.steps)
    actor.close()
    if options.processes > 1:
        data_parallel("embedded", directory, options, policy_batch(samples=16, seed=4))


def hugging_face(options: argparse.Namespace, scratch: str) -> None:
    directory = write_tiny_qwen3(f"{scratch}/qwen3", **QWEN3_SHAPES[options.size])
    model_path = f"hf:{directory}"
    batch = policy_batch(samples=16, seed=3)
    with torch.no_grad():
        direct = load_direct(directory, getattr(torch, options.dtype)).to(options.device)
        batch.rollout_log_probs = torch.cat(direct_logprobs(direct, batch)).numpy().astype(np.float32)
        del direct
    actor = TorchActor(TorchSettings(model_path=model_path, device=options.device, dtype=options.dtype))
    step_checks("hf", actor, batch, exact=options.dtype == "float32")
    saved = f"{scratch}/qwen3-saved"
    actor.save_checkpoint(saved, 1)
    loaded = load_direct(saved, getattr(torch, options.dtype)).state_dict()
    own = actor.rank.model.module.state_dict()
    identical = sorted(loaded) == sorted(own) and all(torch.equal(loaded[key], own[key].cpu()) for key in own)
    report("hf/save_reload", identical, tensors=len(own))
    vocab = actor.rank.model.vocab_size
    ids = np.arange(min(vocab, 151643), dtype=np.int64)
    total = min(options.tokens, actor.rank.model.context_length)
    measure("hf/throughput", actor, throughput_batch(ids, options.samples, total, total // 2), options.steps)
    if torch.cuda.is_available():
        report("hf/peak_memory", None, gib=round(torch.cuda.max_memory_allocated() / 2**30, 2))
    actor.close()
    if options.processes > 1:
        small = write_tiny_qwen3(f"{scratch}/qwen3-tiny")
        data_parallel("hf", f"hf:{small}", options, policy_batch(samples=16, seed=4))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--processes", type=int, default=1, help="> 1 also checks N ranks against one")
    parser.add_argument("--size", choices=tuple(QWEN3_SHAPES), default="0.6b", help="the Qwen3's shape")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--steps", type=int, default=3, help="timed Train steps per model")
    parser.add_argument("--samples", type=int, default=16, help="throughput batch: samples")
    parser.add_argument("--tokens", type=int, default=1024, help="throughput batch: tokens per sample (half trained)")
    options = parser.parse_args()
    if options.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible to torch", file=sys.stderr)
        return 1
    scratch = tempfile.mkdtemp(prefix="dressage-cuda-check-")
    device_name = torch.cuda.get_device_name(0) if options.device == "cuda" else "cpu"
    try:
        embedded(options, scratch)
        hugging_face(options, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"device": device_name, "torch": torch.__version__, "options": vars(options), "failed": failed, "results": results}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
