"""TrainerService on a TrainingActor: stream reassembly, limits, cancellation and status codes."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterator

import grpc

from .actors import TrainingActor
from .errors import WorkerError
from .finite_checks import check_batch_values
from .packed_batch import BatchAssembler
from .slime_settings import loss_overrides
from .stubs import trainer_pb2, trainer_pb2_grpc

LOGGER = logging.getLogger("dressage_megatron_worker")
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class TrainerService(trainer_pb2_grpc.TrainerServiceServicer):
    """One Train (or UpdateWeights) at a time: a second waits, and Health reports BUSY meanwhile."""

    def __init__(
        self,
        actor: TrainingActor,
        model_name: str = "",
        max_batch_tokens: int = 2**31 - 1,
        max_batch_samples: int = 2**31 - 1,
    ) -> None:
        self.actor = actor
        self.model_name = model_name
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_samples = max_batch_samples
        self.train_steps = 0
        self._lock = threading.Lock()
        self._busy = 0

    def _fail(self, context: grpc.ServicerContext, method: str, error: Exception) -> None:
        if isinstance(error, WorkerError):
            LOGGER.warning("%s rejected: %s", method, error.message)
            context.abort(error.code, error.message)
        LOGGER.exception("%s failed", method)
        context.abort(grpc.StatusCode.INTERNAL, f"{method} failed: {error}")

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        # An actor whose model bounds the id space or the sample length says so (the torch actor).
        limits = getattr(self.actor, "model_limits", None)
        vocab_size, longest = limits() if limits is not None else (0, self.max_batch_tokens)
        return trainer_pb2.GetInfoResponse(
            trainer_kind=self.actor.kind,
            model_name=self.model_name,
            weight_version=self.actor.weight_version,
            vocab_size=vocab_size,
            max_tokens_per_sample=min(longest, self.max_batch_tokens),
            backend=self.actor.backend,
            data_parallel_size=self.actor.data_parallel_size,
            train_steps=self.train_steps,
        )

    def Health(self, request: Any, context: grpc.ServicerContext) -> Any:
        status = trainer_pb2.HealthResponse.STATUS_BUSY if self._busy else trainer_pb2.HealthResponse.STATUS_SERVING
        return trainer_pb2.HealthResponse(status=status, message="busy" if self._busy else "serving")

    def Train(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Any:
        started = time.monotonic()
        assembler = BatchAssembler(self.max_batch_tokens, self.max_batch_samples)
        try:
            for chunk in request_iterator:
                assembler.push(chunk)
            header, batch = assembler.finish()
            # Every actor trains on finite numbers only: refused here, before any of them sees it.
            check_batch_values(batch)
        except grpc.RpcError:
            # The client cancelled or the deadline passed while streaming: nothing to answer.
            return trainer_pb2.TrainResponse()
        except Exception as error:  # noqa: BLE001 - mapped to a status for the client
            self._fail(context, "Train", error)
        if not context.is_active():
            return trainer_pb2.TrainResponse()
        self._busy += 1
        try:
            with self._lock:
                result = self.actor.train(header.rollout_id, header, batch, loss_overrides(header.loss))
            self.train_steps += 1
        except Exception as error:  # noqa: BLE001
            self._fail(context, "Train", error)
        finally:
            self._busy -= 1
        return trainer_pb2.TrainResponse(
            batch_id=header.batch_id,
            rollout_id=header.rollout_id,
            samples_trained=result.samples_trained,
            tokens_trained=result.tokens_trained,
            optimizer_steps=result.optimizer_steps,
            metrics=result.metrics,
            duration_seconds=time.monotonic() - started,
        )

    def UpdateWeights(self, request: Any, context: grpc.ServicerContext) -> Any:
        started = time.monotonic()
        self._busy += 1
        try:
            with self._lock:
                version, engines = self.actor.update_weights(request.weight_version, list(request.engine_urls))
        except Exception as error:  # noqa: BLE001
            self._fail(context, "UpdateWeights", error)
        finally:
            self._busy -= 1
        return trainer_pb2.UpdateWeightsResponse(
            weight_version=version, engines_updated=engines, duration_seconds=time.monotonic() - started
        )

    def SaveCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            with self._lock:
                path, size = self.actor.save_checkpoint(request.path, request.rollout_id)
        except Exception as error:  # noqa: BLE001
            self._fail(context, "SaveCheckpoint", error)
        return trainer_pb2.SaveCheckpointResponse(
            path=path, rollout_id=request.rollout_id, size_bytes=size, weight_version=self.actor.weight_version
        )

    def LoadCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            with self._lock:
                rollout_id = self.actor.load_checkpoint(request.path)
        except Exception as error:  # noqa: BLE001
            self._fail(context, "LoadCheckpoint", error)
        return trainer_pb2.LoadCheckpointResponse(
            path=request.path, rollout_id=rollout_id, weight_version=self.actor.weight_version
        )


def message_limit_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    """gRPC's 4 MiB default is below one sample of a long trajectory: raise both directions."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]
