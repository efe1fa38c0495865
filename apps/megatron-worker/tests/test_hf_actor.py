"""The torch actor with a Hugging Face causal LM (`--model hf:DIRECTORY`): a tiny randomly
initialised Qwen3 (two layers, tied embeddings like the small Qwen3 models) built from its config,
checked against `transformers`' own forward pass and `torch.optim.Adam` by hand."""

import http.server
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import unittest

import grpc
import numpy as np
import torch

from dressage_megatron_worker.embedded_checkpoint import read_trainer_state, write_trainer_state
from dressage_megatron_worker.errors import WorkerError
from dressage_megatron_worker.stubs import trainer_pb2
from dressage_megatron_worker.torch_actor import TorchActor, TorchSettings

from .test_torch_actor import ActorTestCase, EngineRecorder, batch_chunks, header
from .torch_fixtures import policy_batch, write_tiny_checkpoint

HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
NO_TRANSFORMERS = (
    "transformers is not importable by this interpreter (Debian packages no python3-transformers): run these "
    "tests with an interpreter that has torch, transformers and safetensors"
)
if HAS_TRANSFORMERS:
    import transformers

    transformers.utils.logging.disable_progress_bar()
# Ids up to 610 (torch_fixtures.VOCABULARY) are read and trained.
VOCAB_SIZE = 640
CONTEXT = 64


def write_tiny_qwen3(directory: str | None = None, seed: int = 0, **changes) -> str:
    """A randomly initialised two-layer Qwen3 saved with `save_pretrained`, plus tokenizer files
    the published weights must carry along."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    directory = directory or tempfile.mkdtemp(prefix="hf-actor-test-")
    config = Qwen3Config(
        **{
            "vocab_size": VOCAB_SIZE,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "max_position_embeddings": CONTEXT,
            "tie_word_embeddings": True,
            "initializer_range": 0.2,
            **changes,
        }
    )
    torch.manual_seed(seed)
    Qwen3ForCausalLM(config).save_pretrained(directory)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as handle:
        json.dump({"model_max_length": CONTEXT}, handle)
    with open(os.path.join(directory, "chat_template.jinja"), "w", encoding="utf-8") as handle:
        handle.write("{% for message in messages %}{{ message.content }}{% endfor %}")
    return directory


def load_direct(directory: str, dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval()


def samples_of(batch):
    ends = np.cumsum(batch.total_lengths)
    return [batch.tokens[end - total : end].astype(np.int64) for end, total in zip(ends, batch.total_lengths)]


def direct_logprobs(module, batch) -> list[torch.Tensor]:
    """Per sample, the logprobs of its response tokens from one unpadded forward pass each (on
    the module's device; returned on the CPU)."""
    result = []
    for tokens, response in zip(samples_of(batch), batch.response_lengths):
        ids = torch.from_numpy(tokens)[None].to(module.device)
        logits = module(input_ids=ids).logits[0, :-1].float()
        picked = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
        result.append(picked[len(tokens) - 1 - int(response) :].cpu())
    return result


def reducer_weights(batch, global_batch_size: int) -> list[torch.Tensor]:
    """slime's per-rollout reducer with the batch's exact denominators: mask / d / global batch."""
    ends = np.cumsum(batch.response_lengths)
    return [
        torch.from_numpy(batch.loss_masks[end - response : end].astype(np.float64) / denominator / global_batch_size)
        for end, response, denominator in zip(ends, batch.response_lengths, batch.rollout_mask_sums)
    ]


class EngineLoader(EngineRecorder):
    """An engine that loads the published directory with `from_pretrained`."""

    received: list = []
    load = staticmethod(lambda path: (load_direct(path), sorted(os.listdir(path))))


@unittest.skipUnless(HAS_TRANSFORMERS, NO_TRANSFORMERS)
class HuggingFaceActorTest(ActorTestCase):
    def setUp(self) -> None:
        self.directory = write_tiny_qwen3()
        self.model_path = f"hf:{self.directory}"
        self.addCleanup(shutil.rmtree, self.directory, True)

    def parameters(self, actor: TorchActor) -> dict[str, torch.Tensor]:
        return {name: tensor.detach().clone() for name, tensor in actor.rank.model.parameters.items()}

    def test_the_trainer_logprobs_are_a_direct_forward_pass(self) -> None:
        actor = self.actor()
        batch = policy_batch()
        with torch.no_grad():
            direct = direct_logprobs(load_direct(self.directory), batch)
        batch.rollout_log_probs = torch.cat(direct).numpy().astype(np.float32)
        # Padded micro-batches, positions picked from the flat hidden states, the output layer on
        # those alone: the same numbers as one plain forward pass per sample.
        result = actor.train(1, header(learning_rate=0.01), batch, {})
        self.assertLess(result.metrics["train_rollout_logprob_abs_diff_max"], 1e-5)
        # The metric measures: logprobs half a nat off read as half a nat.
        fresh = self.actor()
        batch.rollout_log_probs = batch.rollout_log_probs - 0.5
        self.assertAlmostEqual(fresh.train(1, header(), batch, {}).metrics["train_rollout_logprob_abs_diff"], 0.5, delta=1e-5)

    def test_one_step_is_the_hand_computed_gradient_and_adam_step(self) -> None:
        actor = self.actor(max_gradient_norm=0.0)
        batch = policy_batch()
        result = actor.train(1, header(learning_rate=0.01), batch, {})
        self.assertEqual(result.optimizer_steps, 1)
        # By hand: one rollout per sample (global batch 8), the current logprobs as the old ones,
        # so the ratio is 1 and the loss is −Σ mask·A/(d·8) · exp(logp − stop_gradient(logp)).
        reference = load_direct(self.directory)
        weights = reducer_weights(batch, batch.sample_count)
        loss = sum(
            (-float(reward) * torch.exp(lp - lp.detach()) * weight).sum()
            for lp, weight, reward in zip(direct_logprobs(reference, batch), weights, batch.rewards)
        )
        loss.backward()
        self.assertAlmostEqual(result.metrics["loss"], float(loss.detach()), delta=1e-6)
        expected = dict(reference.named_parameters())
        self.assertEqual(sorted(expected), sorted(actor.rank.model.parameters))
        norm = float(torch.sqrt(sum(parameter.grad.double().pow(2).sum() for parameter in expected.values())))
        self.assertAlmostEqual(result.metrics["grad_norm"], norm, delta=1e-5 * norm)
        for name, parameter in actor.rank.model.parameters.items():
            # float32 sums in another order: equal to rounding of the tensor's largest entry.
            scale = float(expected[name].grad.abs().max())
            torch.testing.assert_close(parameter.grad, expected[name].grad, rtol=1e-4, atol=1e-5 * scale, msg=name)
        torch.optim.Adam(reference.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8).step()
        start = load_direct(self.directory).state_dict()
        for name, parameter in actor.rank.model.parameters.items():
            # Adam's first step is lr·g/(|g| + 1e-8): for a gradient at rounding size its sign is
            # noise, so entries are compared where the gradient is clearly not zero; every weight
            # moves by at most the learning rate.
            stable = expected[name].grad.abs() > 1e-5
            self.assertGreater(int(stable.sum()), 0, name)
            torch.testing.assert_close(parameter.detach()[stable], expected[name].detach()[stable], rtol=0, atol=1e-6, msg=name)
            moved = (parameter.detach() - start[name]).abs()
            self.assertLessEqual(float(moved.max()), 0.01 * (1 + 1e-5), name)
            self.assertGreater(float(moved[stable].min()), 0.009, name)

    def test_the_kl_reference_is_the_starting_weights(self) -> None:
        actor = self.actor()
        batch = policy_batch()
        kl = {"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_loss_type": "k1", "learning_rate": 0.01}
        first = actor.train(1, header(**kl), batch, {})
        # Nothing has moved yet: the reference (swapped in with functional_call) is the model.
        self.assertEqual(first.metrics["kl_loss"], 0.0)
        trained = load_direct(self.directory)
        trained.load_state_dict(actor.rank.model.module.state_dict())
        second = actor.train(2, header(**kl), batch, {})
        with torch.no_grad():
            now = direct_logprobs(trained, batch)
            start = direct_logprobs(load_direct(self.directory), batch)
        expected = sum(
            ((lp - ref).double() * weight).sum() for lp, ref, weight in zip(now, start, reducer_weights(batch, 8))
        )
        self.assertNotEqual(float(expected), 0.0)
        self.assertAlmostEqual(second.metrics["kl_loss"], float(expected), delta=1e-6)
        # The reference tensors were read, never written.
        for name, tensor in load_direct(self.directory).named_parameters():
            self.assertTrue(torch.equal(actor.rank.reference[name], tensor), name)

    def test_the_kl_reference_is_frozen_at_the_first_kl_step_after_the_warm_start(self) -> None:
        actor = self.actor(dtype="bfloat16")
        batch = policy_batch()
        for step in (1, 2):
            actor.train(step, header(loss_type="sft_loss", learning_rate=0.01), batch, {})
        self.assertIsNone(actor.rank.reference)
        warm = self.parameters(actor)
        kl = {"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_loss_type": "k3", "learning_rate": 0.01}
        self.assertEqual(actor.train(3, header(**kl), batch, {}).metrics["kl_loss"], 0.0)
        # A copy of the warm-started weights, in the model's dtype and on its device.
        for name, tensor in warm.items():
            reference = actor.rank.reference[name]
            self.assertEqual((reference.dtype, reference.device), (tensor.dtype, tensor.device), name)
            self.assertTrue(torch.equal(reference, tensor), name)
            self.assertNotEqual(reference.data_ptr(), actor.rank.model.parameters[name].data_ptr(), name)
        self.assertGreater(actor.train(4, header(**kl), batch, {}).metrics["kl_loss"], 0.0)

    def test_a_checkpoint_carries_the_kl_reference(self) -> None:
        kl = self.KL
        batch = policy_batch()
        first, saved = self.saved_with_a_kl_reference(batch)
        # Beside the Hugging Face files, in the embedded trainer's state layout (float32, by name).
        self.assertIn("embedded-reference.bin", os.listdir(saved))
        with open(os.path.join(saved, "embedded-trainer.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["reference"]["parameters"], list(first.rank.model.parameters))
        expected = first.train(4, header(**kl), batch, {}).metrics["kl_loss"]
        self.assertGreater(expected, 0.0)
        second = self.actor()
        self.assertEqual(second.load_checkpoint(saved), 3)
        self.assertEqual(second.train(4, header(**kl), batch, {}).metrics["kl_loss"], expected)
        # The start directory holds no reference: loading it leaves none.
        second.load_checkpoint(self.directory)
        self.assertIsNone(second.rank.reference)
        self.assertEqual(second.train(1, header(**kl), batch, {}).metrics["kl_loss"], 0.0)
        # A non-finite reference weight is refused whole: the weights and the reference stay.
        state = read_trainer_state(saved, second.rank.model.specs)
        state.reference[-1] = state.reference[-1].copy()
        state.reference[-1].reshape(-1)[1] = np.inf
        write_trainer_state(saved, state, list(second.rank.model.parameters))
        before, reference = self.parameters(second), dict(second.rank.reference)
        with self.assertRaises(WorkerError) as caught:
            second.load_checkpoint(saved)
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn(f"KL reference {second.rank.model.specs[-1][0]}[1] is inf", caught.exception.message)
        for name, tensor in self.parameters(second).items():
            self.assertTrue(torch.equal(tensor, before[name]), name)
            self.assertIs(second.rank.reference[name], reference[name])

    def test_data_parallel_two_processes_match_one(self) -> None:
        batch = policy_batch(samples=12, seed=4)
        results = []
        for processes in (1, 2):
            actor = self.actor(processes=processes, threads=1, max_tokens_per_micro_batch=24)
            metrics = actor.train(1, header(learning_rate=0.01, use_tis=True), batch, {}).metrics
            results.append((self.parameters(actor), metrics))
            actor.close()
        (one, metrics_one), (two, metrics_two) = results
        self.assertGreater(metrics_two["micro_batches"], 2)
        for name in one:
            torch.testing.assert_close(two[name], one[name], rtol=0, atol=2e-6, msg=name)
        for name in ("loss", "pg_loss", "tis", "grad_norm"):
            self.assertAlmostEqual(metrics_two[name], metrics_one[name], places=5, msg=name)

    def test_update_weights_writes_a_directory_from_pretrained_loads(self) -> None:
        EngineLoader.received = []
        engine = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EngineLoader)
        threading.Thread(target=engine.serve_forever, daemon=True).start()
        self.addCleanup(engine.server_close)
        self.addCleanup(engine.shutdown)
        actor = self.actor(engine_urls=(f"http://127.0.0.1:{engine.server_address[1]}",))
        stub = self.serve(actor)
        info = stub.GetInfo(trainer_pb2.GetInfoRequest())
        self.assertEqual((info.trainer_kind, info.vocab_size, info.max_tokens_per_sample), ("torch", VOCAB_SIZE, CONTEXT + 1))
        self.assertEqual(info.weight_version, "default")
        self.assertIn("Qwen3ForCausalLM float32", info.backend)
        stub.Train(iter(batch_chunks(policy_batch(), loss=trainer_pb2.LossConfig(learning_rate=0.01))))
        response = stub.UpdateWeights(trainer_pb2.UpdateWeightsRequest())
        self.assertEqual((response.weight_version, response.engines_updated), ("1", 1))
        body, (loaded, files) = EngineLoader.received[-1]
        self.assertEqual(body["weight_version"], "1")
        for name in ("config.json", "model.safetensors", "tokenizer_config.json", "chat_template.jinja"):
            self.assertIn(name, files)
        with open(os.path.join(body["model_path"], "dressage-weights.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["weight_version"], "1")
        # Every tensor, tied output layer included, bit for bit.
        own = actor.rank.model.module.state_dict()
        state = loaded.state_dict()
        self.assertEqual(sorted(state), sorted(own))
        for name, tensor in state.items():
            self.assertTrue(torch.equal(tensor, own[name]), name)
        self.assertFalse(torch.equal(state["model.norm.weight"], load_direct(self.directory).state_dict()["model.norm.weight"]))
        self.assertEqual(stub.UpdateWeights(trainer_pb2.UpdateWeightsRequest(weight_version="v7")).weight_version, "v7")

    def test_non_finite_batches_and_weights_are_refused(self) -> None:
        actor = self.actor()
        stub = self.serve(actor)
        batch = policy_batch()
        batch.rewards[2] = np.nan
        with self.assertRaises(grpc.RpcError) as caught:
            stub.Train(iter(batch_chunks(batch)))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("sample 2 (rollout_id 2) has rewards = nan", caught.exception.details())
        # A NaN weight (a diverged run): the step is skipped, nothing moves, nothing is published.
        name = "model.layers.1.mlp.down_proj.weight"
        actor.rank.model.parameters[name].data[0, 3] = float("nan")
        before = self.parameters(actor)
        result = actor.train(1, header(learning_rate=0.01), policy_batch(), {})
        self.assertEqual((result.optimizer_steps, result.metrics["nonfinite_step_skipped"]), (0, 1.0))
        for key, tensor in self.parameters(actor).items():
            self.assertTrue(torch.equal(tensor.nan_to_num(), before[key].nan_to_num()), key)
        for call in (lambda: actor.update_weights("", ["http://127.0.0.1:9"]), lambda: actor.save_checkpoint(self.directory + "-saved", 1)):
            with self.assertRaises(WorkerError) as refused:
                call()
            self.assertEqual(refused.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn(f"parameter {name}[3] is nan", refused.exception.message)

    def test_tokens_the_model_cannot_read_or_produce_are_refused(self) -> None:
        actor = self.actor()
        for position, expected in ((0, "token 700 at position 0 is outside the model's input vocabulary"),
                                   (-1, "trainable token 700")):
            batch = policy_batch()
            # The last token of sample 0 is trained (and read by no later token).
            batch.loss_masks[int(batch.response_lengths[0]) - 1] = 1
            batch.tokens[position if position >= 0 else int(batch.total_lengths[0]) - 1] = 700
            with self.subTest(position), self.assertRaises(WorkerError) as caught:
                actor.train(1, header(), batch, {})
            self.assertIn(expected, caught.exception.message)
        batch = policy_batch(samples=4)
        batch.tokens = np.concatenate([batch.tokens, np.full(CONTEXT, 5, dtype=np.int32)])
        batch.total_lengths[-1] += CONTEXT
        with self.assertRaises(WorkerError) as caught:
            actor.train(1, header(), batch, {})
        self.assertIn(f"reads at most {CONTEXT + 1} tokens", caught.exception.message)

    def test_a_checkpoint_restores_weights_and_adam(self) -> None:
        saved = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, saved, True)
        first = self.actor()
        batch = policy_batch()
        first.train(1, header(learning_rate=0.01), batch, {})
        first.update_weights("v1", [])
        first.save_checkpoint(saved, 1)
        first.train(2, header(learning_rate=0.01), batch, {})
        # Weights published by a trainer that started from the checkpoint carry its tokenizer
        # files, not its trainer state.
        started = TorchActor(TorchSettings(model_path=f"hf:{saved}"))
        self.addCleanup(started.close)
        published = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, published, True)
        started.rank.model.write(published, "v2")
        self.assertIn("tokenizer_config.json", os.listdir(published))
        self.assertNotIn("embedded-trainer.json", os.listdir(published))
        second = self.actor()
        self.assertEqual(second.load_checkpoint(saved), 1)
        self.assertEqual(second.weight_version, "v1")
        second.train(2, header(learning_rate=0.01), batch, {})
        one, two = self.parameters(first), self.parameters(second)
        # Same weights, moments and step count: the resumed step is the step that was not interrupted.
        for name in one:
            torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-6, msg=name)
        other = write_tiny_qwen3(hidden_size=16)
        self.addCleanup(shutil.rmtree, other, True)
        with self.assertRaises(WorkerError) as caught:
            second.load_checkpoint(other)
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("different model", caught.exception.message)

    def test_a_checkpoint_with_an_infinite_weight_is_refused_whole(self) -> None:
        broken = write_tiny_qwen3(seed=3)
        self.addCleanup(shutil.rmtree, broken, True)
        module = load_direct(broken)
        with torch.no_grad():
            module.model.norm.weight[2] = float("inf")
        module.save_pretrained(broken)
        actor = self.actor()
        before = self.parameters(actor)
        with self.assertRaises(WorkerError) as caught:
            actor.load_checkpoint(broken)
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("parameter model.norm.weight[2] is inf", caught.exception.message)
        for name, tensor in self.parameters(actor).items():
            self.assertTrue(torch.equal(tensor, before[name]), name)

    def test_bfloat16_trains_and_publishes_bfloat16(self) -> None:
        actor = self.actor(dtype="bfloat16")
        before = self.parameters(actor)
        self.assertTrue(all(tensor.dtype == torch.bfloat16 for tensor in before.values()))
        result = actor.train(1, header(learning_rate=0.01), policy_batch(), {})
        self.assertEqual(result.optimizer_steps, 1)
        after = self.parameters(actor)
        self.assertTrue(any(not torch.equal(before[name], after[name]) for name in before))
        saved = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, saved, True)
        actor.save_checkpoint(saved, 1)
        loaded = load_direct(saved, torch.bfloat16).state_dict()
        for name, tensor in actor.rank.model.module.state_dict().items():
            self.assertTrue(torch.equal(loaded[name], tensor), name)
        with open(os.path.join(saved, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
        # `dtype` since transformers 4.56, `torch_dtype` before.
        self.assertEqual(config.get("dtype", config.get("torch_dtype")), "bfloat16")


class HuggingFaceSettingsTest(unittest.TestCase):
    @unittest.skipIf(HAS_TRANSFORMERS, "transformers is installed here")
    def test_without_transformers_the_worker_says_what_is_missing(self) -> None:
        with self.assertRaises(WorkerError) as caught:
            TorchActor(TorchSettings(model_path="hf:/models/Qwen3-0.6B"))
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("needs the transformers package", caught.exception.message)

    def test_dtype_applies_to_hugging_face_models_only(self) -> None:
        directory = write_tiny_checkpoint()
        self.addCleanup(shutil.rmtree, directory, True)
        with self.assertRaises(WorkerError) as caught:
            TorchActor(TorchSettings(model_path=directory, dtype="bfloat16"))
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("--dtype", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
