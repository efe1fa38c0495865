"""Starts the worker: `python3 -m dressage_megatron_worker --port 50051 --actor slime -- <slime args>`
(`--dry-run` checks the slime arguments and the router instead)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from concurrent import futures
from typing import Any, Sequence

import grpc

from .actors import RecordingActor, SinkActor, TrainingActor
from .errors import WorkerError
from .service import DEFAULT_MAX_MESSAGE_BYTES, TrainerService, message_limit_options
from .slime_actor import SlimeMegatronActor
from .stubs import trainer_pb2
from .train_chunk_codec import train_chunk_deserializer

SERVICE_NAME = "dressage.trainer.v1.TrainerService"
# TrainerService's unary methods; each takes <Name>Request and answers <Name>Response.
UNARY_METHODS = ("GetInfo", "Health", "UpdateWeights", "SaveCheckpoint", "LoadCheckpoint")


def add_trainer_service(service: TrainerService, server: grpc.Server) -> None:
    """Like the generated `add_TrainerServiceServicer_to_server`, but Train reads its chunks with the
    zero-copy reader (train_chunk_codec): same wire format, one copy fewer of every column."""
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(service, name),
            request_deserializer=getattr(trainer_pb2, f"{name}Request").FromString,
            response_serializer=getattr(trainer_pb2, f"{name}Response").SerializeToString,
        )
        for name in UNARY_METHODS
    }
    handlers["Train"] = grpc.stream_unary_rpc_method_handler(
        service.Train,
        request_deserializer=train_chunk_deserializer(trainer_pb2.TrainBatchHeader),
        response_serializer=trainer_pb2.TrainResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))


def create_server(
    service: TrainerService, address: str = "127.0.0.1:0", max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> tuple[grpc.Server, int]:
    """A started gRPC server serving `service`; returns it with the bound port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=message_limit_options(max_message_bytes))
    add_trainer_service(service, server)
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"could not listen on {address}")
    server.start()
    return server, port


def _slime_args(argv: Sequence[str]) -> Any:
    # slime parses its own (large) flag set; imported only when the slime actor is chosen.
    from slime.utils.arguments import parse_args

    saved = sys.argv
    sys.argv = [saved[0], *argv]
    try:
        return parse_args()
    finally:
        sys.argv = saved


def build_actor(kind: str, verify: str | None, slime_argv: Sequence[str], options: Any = None) -> TrainingActor:
    if kind == "torch":
        from .torch_actor import TorchActor, TorchSettings

        if not options.model:
            raise WorkerError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "--actor torch needs --model (an embedded checkpoint, or hf:DIRECTORY for a Hugging Face model)",
            )
        return TorchActor(
            TorchSettings(
                model_path=options.model,
                processes=options.processes,
                threads=options.threads,
                temperature=options.temperature,
                learning_rate=options.learning_rate,
                max_learning_rate=options.max_learning_rate,
                max_gradient_norm=options.max_gradient_norm,
                max_tokens_per_micro_batch=options.max_tokens_per_micro_batch,
                engine_urls=tuple(options.engine_url),
                weights_directory=options.weights_dir,
                abort_all_requests=options.abort_all_requests,
                device=options.device,
                dtype=options.dtype,
            )
        )
    if kind == "sink":
        return SinkActor()
    if kind == "recording":
        shape = tuple(int(part) for part in verify.split(",")) if verify else None
        if shape is not None and len(shape) == 3:
            shape = (*shape, 0)
        return RecordingActor(verify=shape)  # type: ignore[arg-type]
    actor = SlimeMegatronActor(_slime_args(slime_argv))
    actor.start()
    return actor


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    slime_argv: list[str] = []
    if "--" in raw:
        split = raw.index("--")
        raw, slime_argv = raw[:split], raw[split + 1 :]
    parser = argparse.ArgumentParser(prog="dressage_megatron_worker", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=50051, help="0 picks a free port")
    parser.add_argument("--actor", choices=("slime", "torch", "recording", "sink"), default="slime")
    torch_options = parser.add_argument_group(
        "--actor torch", "trains the embedded model or a Hugging Face causal LM with PyTorch"
    )
    torch_options.add_argument(
        "--model",
        default=None,
        help="the embedded checkpoint to start from, or hf:DIRECTORY (a Hugging Face model; needs transformers)",
    )
    torch_options.add_argument("--processes", type=int, default=1, help="data-parallel processes (gloo)")
    torch_options.add_argument("--threads", type=int, default=0, help="torch threads per process (0: torch's default)")
    torch_options.add_argument("--temperature", type=float, default=1.0, help="the rollout sampling temperature")
    torch_options.add_argument("--learning-rate", type=float, default=1e-3, help="when a batch's LossConfig has none")
    torch_options.add_argument("--max-learning-rate", type=float, default=1.0)
    torch_options.add_argument("--max-gradient-norm", type=float, default=1.0, help="global norm clip; 0 disables")
    torch_options.add_argument("--max-tokens-per-micro-batch", type=int, default=4096)
    torch_options.add_argument("--engine-url", action="append", default=[], help="an engine UpdateWeights publishes to")
    torch_options.add_argument("--weights-dir", default=None, help="where published weights go (default: a temporary folder)")
    torch_options.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: one GPU per process, nccl")
    torch_options.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="hf: models: the dtype of weights, gradients and Adam moments",
    )
    torch_options.add_argument("--abort-all-requests", action="store_true", help="engines abort running requests on update")
    parser.add_argument("--model-name", default="")
    parser.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES)
    parser.add_argument("--max-batch-tokens", type=int, default=2**31 - 1)
    parser.add_argument(
        "--verify", default=None, help="recording actor: SAMPLES,TOKENS,RESPONSE[,SEED] of the synthetic batch"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the slime arguments after -- and the router, print one JSON line per check, and exit",
    )
    parser.add_argument("--router-url", default=None, help="dry run: the router the proxy routes to")
    parser.add_argument(
        "--stop-at-stdin-eof",
        action="store_true",
        help="also stop when stdin ends (a parent process that pipes stdin and may die without signalling); "
        "by default only SIGTERM/SIGINT stop the worker, as `ray job submit` starts it with no stdin",
    )
    options = parser.parse_args(raw)
    if options.dry_run:
        from .dry_run import main as dry_run

        return dry_run(slime_argv, options.router_url)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        actor = build_actor(options.actor, options.verify, slime_argv, options)
    except WorkerError as error:
        # A launch slime cannot serve (colocated engines, a router listing engines slime does not
        # update, ...): say why and exit, rather than a traceback.
        print(f"dressage_megatron_worker: {error.message}", file=sys.stderr, flush=True)
        return 1
    service = TrainerService(actor, model_name=options.model_name, max_batch_tokens=options.max_batch_tokens)
    server, port = create_server(service, f"{options.host}:{options.port}", options.max_message_bytes)
    # The first stdout line tells a parent process where we listen.
    print(f"listening on {options.host}:{port}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    if options.stop_at_stdin_eof:
        # A parent that goes away closes our stdin: stop with it rather than linger. Only on request:
        # Ray's job supervisor, KubeRay and `docker run` without -i start us with stdin at end of file.
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    stop.wait()
    server.stop(grace=2).wait()
    close = getattr(actor, "close", None)
    if close is not None:
        close()
    return 0
