import http.server
import json
import os
import shutil
import tempfile
import threading
import unittest

import grpc
import numpy as np
import torch

from dressage_megatron_worker.embedded_checkpoint import (
    TRAINER_STATE_FILE,
    read_checkpoint,
    read_trainer_state,
    write_checkpoint,
    write_trainer_state,
)
from dressage_megatron_worker.errors import WorkerError
from dressage_megatron_worker.server import create_server
from dressage_megatron_worker.service import TrainerService, message_limit_options
from dressage_megatron_worker.stubs import trainer_pb2, trainer_pb2_grpc
from dressage_megatron_worker.torch_actor import TorchActor, TorchSettings, next_weight_version

from .torch_fixtures import VOCABULARY, policy_batch, write_tiny_checkpoint


def header(**loss) -> trainer_pb2.TrainBatchHeader:
    return trainer_pb2.TrainBatchHeader(rollout_id=3, loss=trainer_pb2.LossConfig(**loss))


def batch_chunks(batch, **fields) -> list:
    stream = [
        trainer_pb2.TrainChunk(
            header=trainer_pb2.TrainBatchHeader(
                sample_count=batch.sample_count, token_count=int(batch.tokens.size), **fields
            )
        )
    ]
    block = trainer_pb2.SampleBlock(sample_count=batch.sample_count)
    for name in ("tokens", "total_lengths", "response_lengths", "loss_masks", "rollout_log_probs", "rollout_ids",
                 "rewards", "raw_rewards", "rollout_mask_sums", "truncated", "sample_indices"):
        setattr(block, name, getattr(batch, name).tobytes())
    stream.append(trainer_pb2.TrainChunk(samples=block))
    return stream


class EngineRecorder(http.server.BaseHTTPRequestHandler):
    """An engine's /update_weights_from_disk: loads the checkpoint it is given (`load`), as the
    engine does, and keeps (request body, what it loaded)."""

    received: list = []
    load = staticmethod(read_checkpoint)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.received.append((body, self.load(body["model_path"])))
        answer = json.dumps({"success": True}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


class ActorTestCase(unittest.TestCase):
    """Starts torch actors on `model_path` and serves them on loopback, closing both after the test."""

    model_path = ""

    def actor(self, **settings) -> TorchActor:
        actor = TorchActor(TorchSettings(model_path=self.model_path, **settings))
        self.addCleanup(actor.close)
        return actor

    # A KL loss setting whose term is never negative (so "> 0" says the weights moved from the reference).
    KL = {"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_loss_type": "low_var_kl", "learning_rate": 0.01}

    def saved_with_a_kl_reference(self, batch) -> tuple[TorchActor, str]:
        """An actor after a supervised step and two KL steps (the reference frozen at the first of
        them), and the checkpoint it then saved."""
        saved = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, saved, True)
        actor = self.actor()
        actor.train(1, header(loss_type="sft_loss", learning_rate=0.01), batch, {})
        actor.train(2, header(**self.KL), batch, {})
        actor.train(3, header(**self.KL), batch, {})
        actor.save_checkpoint(saved, 3)
        return actor, saved

    def serve(self, actor: TorchActor) -> trainer_pb2_grpc.TrainerServiceStub:
        server, port = create_server(TrainerService(actor, model_name="tiny"))
        self.addCleanup(server.stop, None)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=message_limit_options())
        self.addCleanup(channel.close)
        return trainer_pb2_grpc.TrainerServiceStub(channel)


class TorchActorTest(ActorTestCase):
    def setUp(self) -> None:
        self.directory = self.model_path = write_tiny_checkpoint()
        self.addCleanup(shutil.rmtree, self.directory, True)

    def test_threads_flag_sets_the_torch_threads_of_the_actor(self) -> None:
        # `trainer.worker.threads` reaches the worker as --threads: the worker's own parser hands it
        # to the actor it builds, which sets torch's intra-op threads.
        from dressage_megatron_worker import server

        captured = []

        def capture(kind, verify, slime_argv, options=None):
            captured.append(options)
            raise WorkerError(grpc.StatusCode.INVALID_ARGUMENT, "stop after parsing")

        before = torch.get_num_threads()
        self.addCleanup(torch.set_num_threads, before)
        wanted = 1 if before > 1 else 2
        original = server.build_actor
        server.build_actor = capture
        try:
            self.assertEqual(server.main(["--actor", "torch", "--model", self.model_path, "--threads", str(wanted)]), 1)
        finally:
            server.build_actor = original
        self.assertEqual(captured[0].threads, wanted)
        actor = server.build_actor("torch", None, [], captured[0])
        self.addCleanup(actor.close)
        self.assertEqual(torch.get_num_threads(), wanted)

    def test_train_over_grpc_updates_the_weights_and_reports_the_loss(self) -> None:
        actor = self.actor()
        stub = self.serve(actor)
        info = stub.GetInfo(trainer_pb2.GetInfoRequest())
        self.assertEqual((info.trainer_kind, info.data_parallel_size, info.weight_version), ("torch", 1, "0"))
        # The tiny model: context 32, largest known id 610.
        self.assertEqual((info.vocab_size, info.max_tokens_per_sample), (611, 33))
        before = actor.rank.model.weights()
        batch = policy_batch()
        loss = trainer_pb2.LossConfig(use_tis=True, learning_rate=0.01, eps_clip_high=0.28)
        response = stub.Train(iter(batch_chunks(batch, rollout_id=4, loss=loss)))
        self.assertEqual((response.rollout_id, response.samples_trained, response.optimizer_steps), (4, 8, 1))
        self.assertEqual(response.tokens_trained, int(batch.loss_masks.sum()))
        for name in ("loss", "pg_loss", "pg_clipfrac", "ppo_kl", "entropy_loss", "tis", "ois", "grad_norm",
                     "train_rollout_logprob_abs_diff", "train_rollout_logprob_abs_diff_max"):
            self.assertIn(name, response.metrics)
        # Old logprobs are the current ones: the ratio is 1 and nothing clips.
        self.assertEqual(response.metrics["pg_clipfrac"], 0.0)
        after = actor.rank.model.weights()
        self.assertTrue(any(not np.array_equal(before[name], after[name]) for name in before))
        self.assertEqual(stub.Health(trainer_pb2.HealthRequest()).status, trainer_pb2.HealthResponse.STATUS_SERVING)

    def test_the_parity_metric_is_the_distance_to_the_rollout_logprobs(self) -> None:
        actor = self.actor()
        batch = policy_batch()
        # Rollout logprobs from the model itself (what an engine with these weights reports).
        ends = np.cumsum(batch.total_lengths)
        sequences = [batch.tokens[end - total : end] for end, total in zip(ends, batch.total_lengths)]
        own = actor.rank.model.sequence_logprobs(sequences)
        batch.rollout_log_probs = np.concatenate(
            [values[len(values) - response :] for values, response in zip(own, batch.response_lengths)]
        ).astype(np.float32)
        result = actor.train(1, header(), batch, {})
        self.assertLess(result.metrics["train_rollout_logprob_abs_diff_max"], 1e-5)
        batch.rollout_log_probs = batch.rollout_log_probs - 0.5
        self.assertAlmostEqual(actor.train(2, header(), batch, {}).metrics["train_rollout_logprob_abs_diff"], 0.5, delta=0.05)

    def test_a_batch_of_two_steps_measures_parity_on_every_token_before_any_update(self) -> None:
        actor = self.actor()
        batch = policy_batch()
        ends = np.cumsum(batch.total_lengths)
        sequences = [batch.tokens[end - total : end] for end, total in zip(ends, batch.total_lengths)]
        own = actor.rank.model.sequence_logprobs(sequences)
        # The second step's samples (rollouts 4-7) carry logprobs 0.5 off.
        batch.rollout_log_probs = np.concatenate(
            [values[len(values) - response :] - (0.5 if sample >= 4 else 0.0)
             for sample, (values, response) in enumerate(zip(own, batch.response_lengths))]
        ).astype(np.float32)
        result = actor.train(1, trainer_pb2.TrainBatchHeader(global_batch_size=4, loss=trainer_pb2.LossConfig(learning_rate=0.05)), batch, {})
        self.assertEqual(result.optimizer_steps, 2)
        self.assertAlmostEqual(result.metrics["train_rollout_logprob_abs_diff_max"], 0.5, delta=1e-4)

    def test_a_batch_without_trainable_tokens_moves_no_weight(self) -> None:
        actor = self.actor()
        actor.train(1, header(learning_rate=0.01), policy_batch(), {})
        before = actor.rank.model.weights()
        batch = policy_batch()
        batch.loss_masks[:] = 0
        result = actor.train(2, header(learning_rate=0.01), batch, {})
        # Adam's momentum from the first step would still move every weight.
        self.assertEqual((result.optimizer_steps, result.tokens_trained), (0, 0))
        after = actor.rank.model.weights()
        self.assertTrue(all(np.array_equal(before[name], after[name]) for name in before))

    def test_cuda_needs_a_gpu_per_process(self) -> None:
        if torch.cuda.device_count() > 0:
            self.skipTest("this machine has a GPU")
        with self.assertRaises(WorkerError) as caught:
            TorchActor(TorchSettings(model_path=self.directory, device="cuda"))
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("--device cuda needs one GPU per process", caught.exception.message)

    def test_non_finite_inputs_are_refused_naming_the_field(self) -> None:
        stub = self.serve(self.actor())
        for field, index, value, expected in [
            ("rewards", 2, np.nan, "sample 2 (rollout_id 2) has rewards = nan"),
            ("rollout_mask_sums", 1, np.inf, "sample 1 (rollout_id 1) has rollout_mask_sums = inf"),
            ("rollout_log_probs", 4, -np.inf, "rollout_log_probs[4]"),
        ]:
            batch = policy_batch()
            getattr(batch, field)[index] = value
            with self.subTest(field), self.assertRaises(grpc.RpcError) as caught:
                stub.Train(iter(batch_chunks(batch)))
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(expected, caught.exception.details())

    def test_a_non_finite_step_is_skipped_and_nan_weights_are_never_published(self) -> None:
        actor = self.actor()
        # One NaN weight (as a diverged run would leave) makes the loss NaN: the step is skipped,
        # no other weight and no Adam moment moves, and the weights are never published or saved.
        actor.rank.model.parameters["output.bias"].data[3] = float("nan")
        before = actor.rank.model.weights()
        result = actor.train(1, header(learning_rate=0.01), policy_batch(), {})
        self.assertEqual((result.optimizer_steps, result.metrics["nonfinite_step_skipped"]), (0, 1.0))
        after = actor.rank.model.weights()
        self.assertTrue(all(np.array_equal(before[name], after[name], equal_nan=True) for name in before))
        self.assertEqual(actor.rank.optimizer.state, {})
        for call in (lambda: actor.update_weights("", ["http://127.0.0.1:9"]), lambda: actor.save_checkpoint(self.directory + "-saved", 1)):
            with self.assertRaises(WorkerError) as caught:
                call()
            self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("output.bias[3] is nan", caught.exception.message)
        # Once the weights are finite again, steps apply and report no skip.
        actor.rank.model.parameters["output.bias"].data[3] = 0.0
        result = actor.train(2, header(learning_rate=0.01), policy_batch(), {})
        self.assertEqual(result.optimizer_steps, 1)
        self.assertNotIn("nonfinite_step_skipped", result.metrics)

    def test_bad_batches_are_refused_before_training(self) -> None:
        actor = self.actor()
        batch = policy_batch()
        batch.tokens[int(batch.total_lengths[0]) - 1] = 4  # the first sample's last token: not in the vocabulary
        with self.assertRaises(WorkerError) as caught:
            actor.train(1, header(), batch, {})
        self.assertIn("trainable token 4", caught.exception.message)
        with self.assertRaises(WorkerError) as caught:
            actor.train(1, header(loss_type="dpo"), policy_batch(), {})
        self.assertIn("loss.loss_type", caught.exception.message)
        with self.assertRaises(WorkerError) as caught:
            actor.train(1, header(learning_rate=3.0), policy_batch(), {})
        self.assertIn("loss.learning_rate", caught.exception.message)

    def test_a_batch_with_routed_experts_is_refused(self) -> None:
        actor = self.actor()
        batch = policy_batch()
        batch.routed_experts = [
            np.zeros((int(length) - 1, 2, 1), dtype=np.uint8) for length in batch.total_lengths
        ]
        with self.assertRaises(WorkerError) as caught:
            actor.train(1, header(), batch, {})
        self.assertIn("routed experts (routing replay, R3)", caught.exception.message)
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_update_weights_publishes_a_checkpoint_the_engine_loads(self) -> None:
        EngineRecorder.received = []
        engine = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EngineRecorder)
        threading.Thread(target=engine.serve_forever, daemon=True).start()
        self.addCleanup(engine.shutdown)
        url = f"http://127.0.0.1:{engine.server_address[1]}"
        actor = self.actor(engine_urls=(url,))
        stub = self.serve(actor)
        stub.Train(iter(batch_chunks(policy_batch(), loss=trainer_pb2.LossConfig(learning_rate=0.01))))
        response = stub.UpdateWeights(trainer_pb2.UpdateWeightsRequest())
        self.assertEqual((response.weight_version, response.engines_updated), ("1", 1))
        body, checkpoint = EngineRecorder.received[-1]
        self.assertEqual((body["weight_version"], checkpoint.weight_version), ("1", "1"))
        trained = actor.rank.model.weights()
        self.assertTrue(all(np.array_equal(checkpoint.weights[name], trained[name]) for name in trained))
        self.assertEqual(stub.UpdateWeights(trainer_pb2.UpdateWeightsRequest(weight_version="v7")).weight_version, "v7")
        self.assertEqual(next_weight_version("v7"), "v8")
        self.assertEqual(next_weight_version("default"), "1")

    def test_a_checkpoint_restores_weights_and_adam(self) -> None:
        saved = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, saved, True)
        first = self.actor()
        batch = policy_batch()
        first.train(1, header(learning_rate=0.01), batch, {})
        first.save_checkpoint(saved, 1)
        first.train(2, header(learning_rate=0.01), batch, {})
        second = self.actor()
        self.assertEqual(second.load_checkpoint(saved), 1)
        second.train(2, header(learning_rate=0.01), batch, {})
        one, two = first.rank.model.weights(), second.rank.model.weights()
        # Same moments and step count: the resumed step is the step that was not interrupted.
        for name in one:
            np.testing.assert_allclose(one[name], two[name], rtol=0, atol=1e-6)
        other = write_tiny_checkpoint(modelDimension=8, feedForwardDimension=16)
        self.addCleanup(shutil.rmtree, other, True)
        with self.assertRaises(WorkerError) as caught:
            second.load_checkpoint(other)
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

    def test_a_gradient_spike_is_clipped_at_the_factor_times_the_median_norm(self) -> None:
        # The policy gradient is linear in the advantages: rewards x s give gradients x s.
        def scaled(factor: float):
            batch = policy_batch()
            batch.rewards = (batch.rewards * factor).astype(np.float32)
            return batch

        saved = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, saved, True)
        clipped, by_hand, resumed = self.actor(), self.actor(), self.actor()
        norms = []
        for step in range(5):
            result = clipped.train(step, header(learning_rate=0.01, clip_grad_spike=3), scaled(0.01), {})
            # No limit before five norms are recorded.
            self.assertNotIn("grad_spike_limit", result.metrics)
            norms.append(result.metrics["grad_norm"])
            by_hand.train(step, header(learning_rate=0.01), scaled(0.01), {})
        clipped.save_checkpoint(saved, 5)
        with open(os.path.join(saved, TRAINER_STATE_FILE), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["gradient_norms"], norms)
        resumed.load_checkpoint(saved)
        spike = clipped.train(5, header(learning_rate=0.01, clip_grad_spike=3), scaled(1), {})
        limit = spike.metrics["grad_spike_limit"]
        self.assertAlmostEqual(limit, 3 * sorted(norms)[2], places=9)
        self.assertEqual(spike.metrics["grad_spike_clipped"], 1.0)
        self.assertGreater(spike.metrics["grad_norm"], 10 * sorted(norms)[2])
        # Clipped means scaled to the limit: the step of advantages scaled by limit / norm.
        by_hand.train(5, header(learning_rate=0.01), scaled(limit / spike.metrics["grad_norm"]), {})
        ours, theirs = clipped.rank.model.weights(), by_hand.rank.model.weights()
        for name in ours:
            np.testing.assert_allclose(ours[name], theirs[name], rtol=0, atol=1e-6)
        # The resumed actor read the same history from the checkpoint.
        again = resumed.train(5, header(learning_rate=0.01, clip_grad_spike=3), scaled(1), {})
        self.assertEqual(again.metrics["grad_spike_limit"], limit)
        with self.assertRaises(WorkerError) as caught:
            clipped.train(6, header(learning_rate=0.01, clip_grad_spike=1), scaled(1), {})
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("loss.clip_grad_spike", caught.exception.message)

    def test_a_checkpoint_with_non_finite_weights_or_moments_is_refused(self) -> None:
        saved = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, saved, True)
        first = self.actor()
        first.train(1, header(learning_rate=0.01), policy_batch(), {})
        first.save_checkpoint(saved, 1)
        checkpoint = read_checkpoint(saved)
        broken = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, broken, True)
        checkpoint.weights["output.bias"] = checkpoint.weights["output.bias"].copy()
        checkpoint.weights["output.bias"][2] = np.inf
        write_checkpoint(broken, checkpoint)
        second = self.actor()
        before = second.rank.model.weights()
        with self.assertRaises(WorkerError) as caught:
            second.load_checkpoint(broken)
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn(f"the checkpoint in {broken}", caught.exception.message)
        self.assertIn("parameter output.bias[2] is inf", caught.exception.message)
        # Nothing of it was applied.
        after = second.rank.model.weights()
        self.assertTrue(all(np.array_equal(before[name], after[name]) for name in before))
        # Over gRPC too, and a NaN Adam moment in the trainer state is refused as well.
        state = read_trainer_state(saved, second.rank.model.specs)
        state.first_moments[0] = state.first_moments[0].copy()
        state.first_moments[0].reshape(-1)[0] = np.nan
        write_trainer_state(saved, state, [name for name, _ in second.rank.model.specs])
        with self.assertRaises(grpc.RpcError) as rpc:
            self.serve(second).LoadCheckpoint(trainer_pb2.LoadCheckpointRequest(path=saved))
        self.assertEqual(rpc.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("Adam first moment of", rpc.exception.details())

    def test_the_kl_reference_is_frozen_at_the_first_kl_step_not_by_sft_or_plain_steps(self) -> None:
        actor = self.actor()
        batch = policy_batch()
        # A warm-start (supervised steps) and a policy step without the KL loss: no reference yet.
        for step in (1, 2):
            actor.train(step, header(loss_type="sft_loss", learning_rate=0.01), batch, {})
        actor.train(3, header(learning_rate=0.01), batch, {})
        self.assertIsNone(actor.rank.reference)
        warm = actor.rank.model.weights()
        kl = {"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_loss_type": "k2", "learning_rate": 0.01}
        # The first KL step freezes the weights RL starts from: its KL is exactly 0.
        self.assertEqual(actor.train(4, header(**kl), batch, {}).metrics["kl_loss"], 0.0)
        for name, values in warm.items():
            np.testing.assert_array_equal(actor.rank.reference[name].numpy(), values, err_msg=name)
        # Later steps measure the distance from there; further sft steps leave the reference alone.
        self.assertGreater(actor.train(5, header(**kl), batch, {}).metrics["kl_loss"], 0.0)
        actor.train(6, header(loss_type="sft_loss", learning_rate=0.01), batch, {})
        for name, values in warm.items():
            np.testing.assert_array_equal(actor.rank.reference[name].numpy(), values, err_msg=name)

    def test_a_checkpoint_carries_the_kl_reference(self) -> None:
        kl = self.KL
        batch = policy_batch()
        first, saved = self.saved_with_a_kl_reference(batch)
        stored = read_trainer_state(saved, first.rank.model.specs)
        for (name, _), values in zip(first.rank.model.specs, stored.reference):
            np.testing.assert_array_equal(values, first.rank.reference[name].numpy(), err_msg=name)
        expected = first.train(4, header(**kl), batch, {}).metrics["kl_loss"]
        self.assertGreater(expected, 0.0)
        # A trainer started from the untrained weights resumes with the saved reference.
        second = self.actor()
        self.assertEqual(second.load_checkpoint(saved), 3)
        self.assertEqual(second.train(4, header(**kl), batch, {}).metrics["kl_loss"], expected)
        # A checkpoint without a reference leaves none: the next KL step freezes the loaded weights.
        plain = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, plain, True)
        self.actor().save_checkpoint(plain, 1)
        self.assertNotIn("embedded-reference.bin", os.listdir(plain))
        second.load_checkpoint(plain)
        self.assertIsNone(second.rank.reference)
        self.assertEqual(second.train(2, header(**kl), batch, {}).metrics["kl_loss"], 0.0)

    def test_a_checkpoint_with_a_non_finite_kl_reference_is_refused(self) -> None:
        saved = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, saved, True)
        kl = {"use_kl_loss": True, "kl_loss_coef": 0.1, "learning_rate": 0.01}
        first = self.actor()
        first.train(1, header(**kl), policy_batch(), {})
        first.save_checkpoint(saved, 1)
        names = [name for name, _ in first.rank.model.specs]
        state = read_trainer_state(saved, first.rank.model.specs)
        index = names.index("output.bias")
        state.reference[index] = state.reference[index].copy()
        state.reference[index][2] = np.nan
        write_trainer_state(saved, state, names)
        second = self.actor()
        second.train(1, header(learning_rate=0.01), policy_batch(seed=2), {})
        before = second.rank.model.weights()
        with self.assertRaises(grpc.RpcError) as caught:
            self.serve(second).LoadCheckpoint(trainer_pb2.LoadCheckpointRequest(path=saved))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("KL reference output.bias[2] is nan", caught.exception.details())
        # Nothing of it was applied: weights, step count, and still no reference.
        after = second.rank.model.weights()
        self.assertTrue(all(np.array_equal(before[name], after[name]) for name in before))
        self.assertEqual(second.train_steps, 1)
        self.assertIsNone(second.rank.reference)

    def test_a_kl_reference_is_never_frozen_from_non_finite_weights(self) -> None:
        actor = self.actor()
        actor.rank.model.parameters["output.bias"].data[3] = float("nan")
        with self.assertRaises(WorkerError) as caught:
            actor.train(1, header(use_kl_loss=True, learning_rate=0.01), policy_batch(), {})
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("freeze them as the KL reference", caught.exception.message)
        self.assertIsNone(actor.rank.reference)

    def test_the_supervised_loss_lowers_the_negative_log_likelihood(self) -> None:
        actor = self.actor()
        batch = policy_batch()
        losses = [actor.train(step, header(loss_type="sft_loss", learning_rate=0.01), batch, {}).metrics["sft_loss"] for step in range(5)]
        self.assertLess(losses[-1], losses[0])

    def test_data_parallel_two_processes_match_one(self) -> None:
        batch = policy_batch(samples=12, seed=4)
        results = []
        for processes in (1, 2):
            actor = self.actor(processes=processes, threads=1, max_tokens_per_micro_batch=24)
            metrics = [actor.train(step, header(learning_rate=0.01, use_tis=True), batch, {}).metrics for step in range(2)]
            per_token = actor.train(3, header(learning_rate=0.01, calculate_per_token_loss=True), batch, {}).metrics
            results.append((actor.rank.model.weights(), metrics, per_token))
            actor.close()
        (one, metrics_one, token_one), (two, metrics_two, token_two) = results
        self.assertGreater(metrics_two[0]["micro_batches"], 2)
        for name in one:
            np.testing.assert_allclose(two[name], one[name], rtol=0, atol=2e-6, err_msg=name)
        for name in ("loss", "pg_loss", "tis", "grad_norm", "train_rollout_logprob_abs_diff_max"):
            self.assertAlmostEqual(metrics_two[0][name], metrics_one[0][name], places=5, msg=name)
        self.assertAlmostEqual(token_two["loss"], token_one["loss"], places=5)


if __name__ == "__main__":
    unittest.main()
