import unittest

import grpc
import numpy as np

from dressage_megatron_worker.actors import RecordingActor, TrainResult
from dressage_megatron_worker.errors import invalid
from dressage_megatron_worker.server import create_server
from dressage_megatron_worker.service import TrainerService, message_limit_options
from dressage_megatron_worker.stubs import trainer_pb2, trainer_pb2_grpc
from dressage_megatron_worker.synthetic import expected_fields

from .helpers import chunks


class RejectingActor(RecordingActor):
    def train(self, rollout_id, header, batch, loss) -> TrainResult:  # type: ignore[override]
        raise invalid(f"token ids must be below 1000 (rollout {rollout_id}, eps_clip {loss.get('eps_clip')})")


class ServiceTest(unittest.TestCase):
    def serve(self, actor: RecordingActor, **options: int) -> trainer_pb2_grpc.TrainerServiceStub:
        server, port = create_server(TrainerService(actor, model_name="tiny", **options))
        self.addCleanup(server.stop, None)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=message_limit_options())
        self.addCleanup(channel.close)
        return trainer_pb2_grpc.TrainerServiceStub(channel)

    def test_round_trip_with_verification_and_unary_calls(self) -> None:
        actor = RecordingActor(verify=(12, 64, 20, 0))
        stub = self.serve(actor)
        info = stub.GetInfo(trainer_pb2.GetInfoRequest())
        self.assertEqual((info.trainer_kind, info.model_name), ("recording", "tiny"))
        self.assertEqual(stub.Health(trainer_pb2.HealthRequest()).status, trainer_pb2.HealthResponse.STATUS_SERVING)
        loss = trainer_pb2.LossConfig(eps_clip=0.1, use_tis=True)
        response = stub.Train(iter(chunks(expected_fields(12, 64, 20), batch_id="x", rollout_id=5, loss=loss)))
        self.assertEqual((response.batch_id, response.rollout_id, response.samples_trained), ("x", 5, 12))
        self.assertEqual(response.metrics["mismatched_fields"], 0.0)
        header, _batch, data = actor.batches[0]
        self.assertTrue(header.loss.HasField("eps_clip"))
        self.assertFalse(header.loss.HasField("tis_clip"))
        self.assertEqual(len(data["tokens"]), 12)
        self.assertEqual(stub.GetInfo(trainer_pb2.GetInfoRequest()).train_steps, 1)
        update = stub.UpdateWeights(trainer_pb2.UpdateWeightsRequest(engine_urls=["http://a", "http://b"]))
        self.assertEqual((update.weight_version, update.engines_updated), ("1", 2))
        stub.SaveCheckpoint(trainer_pb2.SaveCheckpointRequest(path="/ckpt", rollout_id=5))
        self.assertEqual(stub.LoadCheckpoint(trainer_pb2.LoadCheckpointRequest(path="/ckpt")).rollout_id, 5)

    def test_a_rejected_batch_keeps_its_status_code_and_message(self) -> None:
        stub = self.serve(RejectingActor())
        loss = trainer_pb2.LossConfig(eps_clip=0.3)
        with self.assertRaises(grpc.RpcError) as caught:
            stub.Train(iter(chunks(expected_fields(3, 16, 4), rollout_id=2, loss=loss)))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("token ids must be below 1000 (rollout 2, eps_clip 0.3", caught.exception.details())

    def test_a_non_finite_number_is_refused_at_the_boundary_whatever_the_actor(self) -> None:
        actor = RecordingActor()
        stub = self.serve(actor)
        for field, value, expected in [
            ("rewards", np.nan, "sample 1 (rollout_id "),
            ("rollout_log_probs", np.inf, "rollout_log_probs["),
        ]:
            fields = expected_fields(3, 16, 4)
            values = fields[field].copy()
            values[1] = value
            fields[field] = values
            with self.subTest(field), self.assertRaises(grpc.RpcError) as caught:
                stub.Train(iter(chunks(fields)))
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(expected, caught.exception.details())
            self.assertIn(field, caught.exception.details())
        # The actor never saw either batch, and the service keeps serving.
        self.assertEqual(actor.batches, [])
        self.assertEqual(stub.Train(iter(chunks(expected_fields(3, 16, 4)))).samples_trained, 3)

    def test_malformed_stream_and_limits(self) -> None:
        stub = self.serve(RecordingActor(), max_batch_tokens=100)
        with self.assertRaises(grpc.RpcError) as caught:
            stub.Train(iter(chunks(expected_fields(3, 16, 4))[1:]))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(grpc.RpcError) as caught:
            stub.Train(iter(chunks(expected_fields(30, 16, 4))))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)


if __name__ == "__main__":
    unittest.main()
