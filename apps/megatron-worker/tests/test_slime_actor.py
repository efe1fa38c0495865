"""The slime actor against stand-ins built from the recorded slime API (tests/slime_stand_in.py)."""

import contextlib
import io
import json
import os
import socket
import tempfile
import time
import types
import unittest
from pathlib import Path
from typing import Any
from unittest import mock

import grpc
import numpy as np
import torch

from dressage_megatron_worker import server
from dressage_megatron_worker.errors import WorkerError
from dressage_megatron_worker.slime_actor import SlimeMegatronActor
from dressage_megatron_worker.slime_settings import loss_overrides
from dressage_megatron_worker.slime_train_actor import dressage_actor_class
from dressage_megatron_worker.stubs import trainer_pb2

from .slime_stand_in import Box, Engine, Ref, Router, Slime, check_rank_data, launch_args
from .test_rollout_data import batch

# Four rollouts of one sample each over two prompts; denominators M_P × N / global_batch_size with
# M_P = 5 and 4 trainable tokens, N = 2 prompts, global batch size 16: 0.625 and 0.5, below 1.
MASKS = [[1, 1, 1], [1, 0, 1], [1, 1, 1, 1], [0, 0]]
TRUE_SUMS = [0.625, 0.625, 0.5, 0.0]


def closed_port() -> int:
    """A loopback port nothing listens on (an engine of an earlier run, gone)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def header(**fields: Any) -> Any:
    return trainer_pb2.TrainBatchHeader(**fields)


class Started:
    def __init__(self, test: unittest.TestCase, **args: Any) -> None:
        self.slime = Slime(launch_args(**args), **test.stand_in_options)
        test.addCleanup(self.slime.close)
        self.actor = SlimeMegatronActor(self.slime.args, importer=self.slime.importer)


class SlimeActorTest(unittest.TestCase):
    stand_in_options: dict[str, Any] = {}

    def started(self, **args: Any) -> Started:
        started = Started(self, **{"global_batch_size": 2, **args})
        started.actor.start()
        return started

    def train(self, started: Started, loss: dict[str, Any] | None = None, sums: list[float] | None = None,
              global_batch_size: int = 2) -> Any:
        packed = batch(MASKS, sums or [2.0, 2.0, 1.0, 0.0])
        return started.actor.train(7, header(global_batch_size=global_batch_size, rollout_id=7), packed, loss or {})

    def names(self, started: Started) -> list[str]:
        return [name.split(":")[-1] for name, _ in started.slime.calls]

    def test_starts_as_train_py_does(self) -> None:
        started = self.started()
        calls = self.names(started)
        order = ["create_placement_groups", "create_rollout_manager", "create_training_models", "RayTrainGroup.update_weights"]
        self.assertEqual([name for name in calls if name in order], order)
        arguments = dict(started.slime.calls)["slime.ray.placement_group:create_training_models"]
        self.assertIs(arguments["rollout_manager"], started.slime.rollout_manager)
        self.assertEqual(arguments["actor_cls"].__name__, "DressageMegatronTrainRayActor")
        # The first push made the engines' version 1; the worker reports theirs.
        self.assertEqual(started.actor.weight_version, "1")
        self.assertEqual(started.actor.data_parallel_size, 2)
        manager = started.slime.rollout_manager._instance
        started.actor.close()
        self.assertTrue(manager.disposed)

    def test_tracking_and_memory_are_handled_as_train_py_does(self) -> None:
        started = self.started(use_wandb=True)
        names = self.names(started)
        # The run starts before the actors copy the arguments, or their wandb.log has no run.
        self.assertLess(names.index("init_tracking"), names.index("create_training_models"))
        self.train(started)
        self.train(started)
        steps = [name for name in self.names(started) if name in ("RayTrainGroup.async_train", "RayTrainGroup.clear_memory")]
        self.assertEqual(steps, ["RayTrainGroup.async_train", "RayTrainGroup.clear_memory"] * 2)
        self.assertEqual([actor.memory_cleared for actor in started.slime.group.actors], [2] * 4)
        started.actor.close()
        self.assertEqual(started.slime.tracking, ["init", "finish"])
        offloaded = self.started(offload_train=True)
        self.train(offloaded)
        self.assertEqual([actor.memory_cleared for actor in offloaded.slime.group.actors], [0] * 4)

    def test_every_data_parallel_rank_gets_its_samples_as_torch_tensors(self) -> None:
        started = self.started()
        result = self.train(started)
        actors = started.slime.group.actors
        self.assertEqual(len(actors), 4)
        partitions = {}
        for actor in actors:
            (rollout_id, data, _args), = actor.received
            self.assertEqual(rollout_id, 7)
            partitions.setdefault(actor.dp_rank, data["partition"])
            self.assertEqual(partitions[actor.dp_rank], data["partition"])
            self.assertEqual(data["tokens"][0].dtype, torch.int64)
            self.assertEqual(data["loss_masks"][0].dtype, torch.int32)
            self.assertEqual(data["rollout_log_probs"][0].dtype, torch.float32)
            self.assertEqual(data["rollout_mask_sums"].dtype, torch.float32)
            for position, index in enumerate(data["partition"]):
                self.assertEqual(data["loss_masks"][position].tolist(), MASKS[index])
        self.assertEqual(sorted(partitions[0] + partitions[1]), [0, 1, 2, 3])
        self.assertEqual(result.optimizer_steps, 2)

    def test_loss_overrides_reach_the_actors_copies_for_one_batch(self) -> None:
        started = self.started()
        overrides = loss_overrides(trainer_pb2.LossConfig(eps_clip=0.1, use_tis=True))
        self.train(started, overrides)
        self.train(started)
        for actor in started.slime.group.actors:
            first, second = (received[2] for received in actor.received)
            self.assertEqual((first.eps_clip, first.use_tis), (0.1, True))
            self.assertEqual((second.eps_clip, second.use_tis), (0.2, False))
        self.assertEqual(started.slime.args.eps_clip, 0.2)

    def test_settings_fixed_at_start_are_refused_unless_unchanged(self) -> None:
        started = self.started()
        with self.assertRaisesRegex(WorkerError, "learning_rate = 0.001 differs from the worker's --lr"):
            self.train(started, {"lr": 1e-3})
        with self.assertRaisesRegex(WorkerError, "reference model"):
            self.train(started, {"use_kl_loss": True})
        self.train(started, {"lr": 1e-6})
        with self.assertRaisesRegex(WorkerError, "ppo"):
            self.train(started, {"advantage_estimator": "ppo"})

    def test_the_loss_slime_computes_is_the_true_loss_when_denominators_are_below_one(self) -> None:
        started = self.started(use_kl_loss=True, kl_loss_coef=0.05, entropy_coef=0.01)
        result = self.train(started, sums=TRUE_SUMS)
        self.assertEqual(result.metrics["denominator_scale"], 2.0)
        entropy, kl = 0.7, 0.3

        def slime_loss(rewards, masks, denominators, entropy_coef, kl_loss_coef, clamp=True) -> float:
            # policy_loss_function on-policy (ratio 1): pg -A, minus entropy, plus KL, each reduced by
            # get_sum_of_sample_mean: Σ_t(x·mask) / clamp_min(denominator, 1).
            total = 0.0
            for reward, mask, denominator in zip(rewards, masks, denominators):
                mask = torch.as_tensor(mask, dtype=torch.float64)
                divisor = max(float(denominator), 1.0) if clamp else float(denominator)
                if mask.sum() == 0:
                    continue
                total += float(((-reward - entropy_coef * entropy + kl_loss_coef * kl) * mask).sum()) / divisor
            return total

        received = {}
        for actor in started.slime.group.actors:
            _id, data, args = actor.received[0]
            received.setdefault(actor.dp_rank, (data, args))
        computed = sum(
            slime_loss(data["rewards"], data["loss_masks"], data["rollout_mask_sums"].tolist(), args.entropy_coef, args.kl_loss_coef)
            for data, args in received.values()
        )
        rewards = batch(MASKS, TRUE_SUMS).rewards.tolist()
        true = slime_loss(rewards, MASKS, TRUE_SUMS, 0.01, 0.05, clamp=False)
        self.assertAlmostEqual(computed, true, places=6)
        # The rescaled denominators alone would divide the loss by 2 (the check is not vacuous).
        uncompensated = sum(
            slime_loss(
                [rewards[index] for index in data["partition"]], data["loss_masks"], data["rollout_mask_sums"].tolist(), 0.01, 0.05
            )
            for data, _args in received.values()
        )
        self.assertAlmostEqual(uncompensated * 2, true, places=6)

    def test_per_token_loss_folds_no_scale_because_slimes_reducer_ignores_the_denominators(self) -> None:
        started = self.started(calculate_per_token_loss=True, use_kl_loss=True, kl_loss_coef=0.05, entropy_coef=0.01)
        result = self.train(started, sums=TRUE_SUMS)
        self.assertEqual(result.metrics["denominator_scale"], 1.0)
        entropy, kl = 0.7, 0.3

        def token_terms(rewards, masks, entropy_coef, kl_loss_coef) -> tuple[float, float]:
            # get_sum_of_sample_mean with calculate_per_token_loss returns sum_of_token (cp_utils.py:124):
            # Σ_t(x·mask), no denominator; Megatron divides by Σ clamp_min(mask.sum(), 1) (loss.py:1317).
            total = sum(
                float(((-reward - entropy_coef * entropy + kl_loss_coef * kl) * torch.as_tensor(mask, dtype=torch.float64)).sum())
                for reward, mask in zip(rewards, masks)
            )
            tokens = sum(max(float(torch.as_tensor(mask).sum()), 1.0) for mask in masks)
            return total, tokens

        received = {}
        for actor in started.slime.group.actors:
            _id, data, args = actor.received[0]
            received.setdefault(actor.dp_rank, (data, args))
        total, tokens = 0.0, 0.0
        for data, args in received.values():
            part, count = token_terms(data["rewards"], data["loss_masks"], args.entropy_coef, args.kl_loss_coef)
            total, tokens = total + part, tokens + count
        rewards = batch(MASKS, TRUE_SUMS).rewards.tolist()
        true_total, true_tokens = token_terms(rewards, MASKS, 0.01, 0.05)
        self.assertEqual(tokens, true_tokens)
        self.assertAlmostEqual(total / tokens, true_total / true_tokens, places=6)

    def test_overrides_are_checked_as_slime_checks_the_flags(self) -> None:
        import grpc

        started = self.started(eps_clip_high=0.28)
        for loss, field in (
            ({"advantage_estimator": "reinforce_plus_plus"}, "loss.advantage_estimator 'reinforce_plus_plus'.*--normalize-advantages"),
            ({"advantage_estimator": "reinforce_plus_plus_baseline"}, "--normalize-advantages"),
            ({"use_rollout_logprobs": True, "use_tis": True}, "loss.use_rollout_logprobs and loss.use_tis"),
        ):
            with self.subTest(loss=loss):
                trained = [len(actor.received) for actor in started.slime.group.actors]
                with self.assertRaisesRegex(WorkerError, field) as caught:
                    self.train(started, loss)
                self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertEqual([len(actor.received) for actor in started.slime.group.actors], trained)
        # slime derives eps_clip_high from eps_clip when it is not given (arguments.py:1876).
        self.train(started, {"eps_clip": 0.1})
        self.train(started, {"eps_clip": 0.1, "eps_clip_high": 0.3})
        self.train(started, {"use_rollout_logprobs": True, "use_tis": False})
        args = [received[2] for received in started.slime.group.actors[0].received]
        self.assertEqual([(a.eps_clip, a.eps_clip_high) for a in args], [(0.1, 0.1), (0.1, 0.3), (0.2, 0.28)])
        normalized = self.started(normalize_advantages=True)
        self.train(normalized, {"advantage_estimator": "reinforce_plus_plus"})

    def test_a_batch_slimes_schedule_cannot_split_over_the_ranks_is_refused_naming_why(self) -> None:
        import grpc

        three = batch(MASKS[:3], [2.0, 2.0, 1.0])  # three rollouts of one sample; lengths 5, 5, 6
        for args, size, packed, message in (
            ({"global_batch_size": 3}, 3, three, r"static path: num_mbs \(3\) is not a multiple of dp_size \* mb_group \(2\)"),
            ({"global_batch_size": 1}, 1, three, "step 0: 1 samples < dp_size 2"),
            (
                {"global_batch_size": 3, "use_dynamic_batch_size": True, "max_tokens_per_gpu": 4},
                3,
                three,
                "dynamic path: could only produce 3 mbs after maximal splitting; need 4",
            ),
        ):
            with self.subTest(args=args):
                started = self.started(**args)
                with self.assertRaisesRegex(WorkerError, message) as caught:
                    started.actor.train(7, header(global_batch_size=size, rollout_id=7), packed, {})
                self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertEqual([len(actor.received) for actor in started.slime.group.actors], [0] * 4)
        dynamic = self.started(global_batch_size=2, use_dynamic_batch_size=True, max_tokens_per_gpu=4)
        self.assertEqual(self.train(dynamic).optimizer_steps, 2)

    def test_the_global_batch_size_is_the_launch_one(self) -> None:
        started = self.started()
        with self.assertRaisesRegex(WorkerError, "global_batch_size 1 differs from the worker's --global-batch-size 2"):
            self.train(started, global_batch_size=1)
        self.assertEqual(self.train(started, global_batch_size=0).optimizer_steps, 2)

    def test_a_gradient_spike_clip_is_refused_because_megatron_clips_at_a_fixed_norm(self) -> None:
        started = self.started()
        packed = batch(MASKS, [2.0, 2.0, 1.0, 0.0])
        spiky = header(global_batch_size=2, rollout_id=7, loss=trainer_pb2.LossConfig(clip_grad_spike=3))
        with self.assertRaisesRegex(WorkerError, "loss.clip_grad_spike: the slime actor cannot clip") as caught:
            started.actor.train(7, spiky, packed, {})
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        # Nothing reached the actors: the next batch trains.
        self.assertEqual(self.train(started).optimizer_steps, 2)

    def test_a_loss_scale_that_cannot_be_folded_exactly_is_refused(self) -> None:
        started = self.started(normalize_advantages=True)
        with self.assertRaisesRegex(WorkerError, "--normalize-advantages"):
            self.train(started, sums=TRUE_SUMS)
        self.train(started)

    def test_update_weights_reports_slimes_engine_version(self) -> None:
        started = self.started()
        self.assertEqual(started.actor.update_weights("", []), ("2", 2))
        first, second = (engine.url for engine in started.slime.engines)
        self.assertEqual(started.actor.update_weights("", [second + "/", first]), ("3", 2))
        with self.assertRaisesRegex(WorkerError, "not slime's engines"):
            started.actor.update_weights("", ["http://elsewhere:30000"])
        with self.assertRaisesRegex(WorkerError, "numbers the engines' versions itself"):
            started.actor.update_weights("v9", [])
        self.assertEqual([engine.version for engine in started.slime.engines], [3, 3])

    def test_debug_train_only_never_reports_a_push(self) -> None:
        started = self.started(debug_train_only=True)
        self.assertEqual(started.actor.weight_version, "")
        with self.assertRaisesRegex(WorkerError, "--debug-train-only"):
            started.actor.update_weights("", [])
        self.train(started)

    def test_a_live_router_worker_slime_does_not_own_stops_the_start_and_ours_are_deregistered(self) -> None:
        live = Router()  # any HTTP server answers: an engine someone else added, still serving
        self.addCleanup(live.close)
        self.stand_in_options = {"extra_router_workers": (live.url,)}
        started = Started(self)
        with self.assertRaisesRegex(WorkerError, f"routes to engines slime does not update \\({live.url} answers"):
            started.actor.start()
        # The failed start leaves none of slime's engines registered with the router.
        self.assertEqual(started.slime.router.urls(), [live.url])
        self.assertTrue(all(engine.shut_down for engine in started.slime.engines))

    def test_stale_router_entries_of_an_earlier_run_are_removed_at_start(self) -> None:
        stale = f"http://127.0.0.1:{closed_port()}"
        self.stand_in_options = {"extra_router_workers": (stale,)}
        started = self.started()
        self.assertEqual(started.slime.router.removed, [stale])
        self.assertEqual(started.slime.router.urls(), sorted(engine.url for engine in started.slime.engines))
        self.assertEqual(started.actor.weight_version, "1")

    def test_close_deregisters_slimes_engines_so_a_restart_finds_none(self) -> None:
        started = self.started()
        self.assertEqual(len(started.slime.router.urls()), 2)
        started.actor.close()
        self.assertEqual(started.slime.router.urls(), [])
        self.assertEqual(sorted(started.slime.router.removed), sorted(engine.url for engine in started.slime.engines))

    def test_a_restart_against_a_long_lived_router(self) -> None:
        router = Router()
        self.addCleanup(router.close)
        self.stand_in_options = {"router": router}
        crashed = self.started()
        for engine in crashed.slime.engines:
            engine.kill()  # the first run dies without deregistering: its entries stay, nobody answers
        restarted = self.started()
        self.assertEqual(sorted(router.removed), sorted(engine.url for engine in crashed.slime.engines))
        self.assertEqual(router.urls(), sorted(engine.url for engine in restarted.slime.engines))
        restarted.actor.close()  # a clean stop leaves the router empty for the next run
        self.assertEqual(router.urls(), [])
        again = self.started()
        self.assertEqual(router.urls(), sorted(engine.url for engine in again.slime.engines))

    def test_the_start_waits_for_the_routers_queued_registrations(self) -> None:
        started = Started(self)
        started.slime.router.delay = 0.5
        started.actor.start()
        self.assertEqual(started.slime.router.urls(), sorted(engine.url for engine in started.slime.engines))

    def test_colocated_engines_and_the_critic_are_refused_before_any_gpu_is_taken(self) -> None:
        for args, message in (({"colocate": True}, "--colocate"), ({"use_critic": True}, "ppo")):
            started = Started(self, **args)
            with self.assertRaisesRegex(WorkerError, message):
                started.actor.start()
            self.assertEqual(started.slime.calls, [])

    def test_a_launch_with_no_model_to_load_is_refused_before_any_gpu_is_taken(self) -> None:
        # What slime's post-processing leaves when --load holds nothing and --ref-load is not given.
        started = Started(self, load=None)
        with self.assertRaisesRegex(WorkerError, "pass --ref-load"):
            started.actor.start()
        self.assertEqual(started.slime.calls, [])

    def test_flags_the_worker_does_not_serve_are_refused_at_start_naming_the_flag(self) -> None:
        for args, flag in (
            ({"rollout_top_p": 0.9}, "--rollout-top-p 0.9"),
            ({"release_train": True}, "--release-train"),
            ({"use_fault_tolerance": True}, "--use-fault-tolerance"),
        ):
            with self.subTest(flag=flag):
                started = Started(self, **args)
                with self.assertRaisesRegex(WorkerError, flag):
                    started.actor.start()
                self.assertEqual(started.slime.calls, [])
        self.started(rollout_top_p=1.0)

    def test_a_step_whose_gradient_is_not_finite_is_skipped_and_reported(self) -> None:
        started = self.started()
        clean = self.train(started)
        self.assertNotIn("nonfinite_step_skipped", clean.metrics)
        steps = clean.optimizer_steps
        self.assertGreaterEqual(steps, 1)
        self.assertEqual(started.slime.optimizer_steps, steps)
        # The next batch's first step has a NaN gradient norm: slime skips it (no optimizer step),
        # the others run, and the worker says so.
        started.slime.grad_norms = [1.0] * steps + [float("nan")]
        result = self.train(started)
        self.assertEqual(result.metrics["nonfinite_step_skipped"], 1.0)
        self.assertEqual(result.optimizer_steps, steps - 1)
        self.assertEqual(started.slime.optimizer_steps, 2 * steps - 1)

    def test_megatrons_nan_check_must_be_off_so_that_steps_are_skipped_not_failed(self) -> None:
        started = Started(self, check_for_nan_in_loss_and_grad=True)
        with self.assertRaisesRegex(WorkerError, "--no-check-for-nan-in-loss-and-grad"):
            started.actor.start()
        self.assertEqual(started.slime.calls, [])

    def test_checkpoints_go_where_megatron_writes_them(self) -> None:
        directory = tempfile.mkdtemp()
        started = self.started(save=directory)
        # rollout_id counts the rollouts trained: Megatron saves the last one's iteration, from
        # which slime resumes at rollout_id (actor.py:114).
        path, size = started.actor.save_checkpoint("", 5)
        self.assertEqual(path, f"{directory}/iter_0000004")
        state = os.path.join(path, "dressage-checkpoint.json")
        self.assertEqual(size, 4 * 128 + os.path.getsize(state))
        self.assertEqual(json.loads(Path(state).read_text()), {"rollout_id": 4, "weight_version": 1})
        self.assertEqual(Path(directory, "latest_checkpointed_iteration.txt").read_text(), "4")
        self.assertEqual(started.actor.save_checkpoint(directory + "/", 6)[0], f"{directory}/iter_0000005")
        self.assertEqual(started.actor.save_checkpoint(f"{directory}/iter_0000006", 7)[0], f"{directory}/iter_0000006")
        with self.assertRaisesRegex(WorkerError, "restart with --save PATH"):
            started.actor.save_checkpoint("/elsewhere", 7)
        with self.assertRaisesRegex(WorkerError, "rollout_id 0"):
            started.actor.save_checkpoint("", 0)
        with self.assertRaisesRegex(WorkerError, "without --save"):
            self.started().actor.save_checkpoint("", 1)

    def test_the_checkpoint_size_is_measured_by_the_ranks_when_save_is_on_their_own_disks(self) -> None:
        disks = (tempfile.mkdtemp(), tempfile.mkdtemp())
        self.stand_in_options = {"node_disks": disks}
        started = self.started(save="/ckpt/run", actor_num_nodes=2, actor_num_gpus_per_node=2)
        path, size = started.actor.save_checkpoint("", 3)
        self.assertEqual(path, "/ckpt/run/iter_0000002")
        self.assertFalse(os.path.exists(path), "the driver does not see the nodes' disks")
        shards = [os.path.join(disk, "ckpt/run/iter_0000002", f"rank_{rank}.pt") for disk, rank in zip(disks * 2, (0, 2, 1, 3))]
        self.assertTrue(all(os.path.exists(shard) for shard in shards))
        # Four shards of 128 bytes and the state file (written on both nodes, counted once).
        state = os.path.getsize(os.path.join(disks[0], "ckpt/run/iter_0000002/dressage-checkpoint.json"))
        self.assertEqual(size, 4 * 128 + state)

    def test_a_worker_restarted_with_load_continues_the_rollout_and_the_weight_version(self) -> None:
        directory = tempfile.mkdtemp()
        first = self.started(save=directory)
        self.train(first)
        self.assertEqual(first.actor.update_weights("", []), ("2", 2))
        self.assertEqual(first.actor.update_weights("", []), ("3", 2))
        saved, _size = first.actor.save_checkpoint("", 3)
        with self.assertRaisesRegex(WorkerError, f"restart the worker with --load {directory} "):
            first.actor.load_checkpoint(saved)
        first.actor.close()

        # The operator restarts the job with --load pointing at --save.
        second = self.started(save=directory, load=directory)
        self.assertEqual(second.slime.args.start_rollout_id, 3)
        # Versions continue: the start's push after the checkpoint's version 3.
        self.assertEqual(second.actor.weight_version, "4")
        self.assertEqual([engine.version for engine in second.slime.engines], [4, 4])
        self.assertEqual(second.actor.load_checkpoint(saved), 3)
        self.assertEqual(second.actor.load_checkpoint(directory), 3)
        with self.assertRaisesRegex(WorkerError, f"these started from {directory}/iter_0000002"):
            second.actor.load_checkpoint(f"{directory}/iter_0000001")
        self.assertEqual(second.actor.update_weights("", []), ("5", 2))

    def test_the_worker_exits_with_the_reason_when_slime_cannot_be_driven(self) -> None:
        errors = io.StringIO()
        with mock.patch.object(server, "_slime_args", return_value=launch_args(colocate=True)), contextlib.redirect_stderr(errors):
            self.assertEqual(server.main(["--actor", "slime", "--", "--colocate"]), 1)
        self.assertIn("dressage_megatron_worker: cannot drive slime with these arguments: --colocate", errors.getvalue())

    def test_nothing_of_slime_is_imported_before_start(self) -> None:
        imported: list[str] = []
        SlimeMegatronActor(types.SimpleNamespace(), importer=lambda name: imported.append(name))
        self.assertEqual(imported, [])


class StandInTest(unittest.TestCase):
    """The stand-ins refuse what slime would."""

    def setUp(self) -> None:
        self.slime = Slime(launch_args())
        self.addCleanup(self.slime.close)

    def test_signatures_are_the_recorded_ones(self) -> None:
        placement = self.slime.importer("slime.ray.placement_group")
        groups = placement.create_placement_groups(self.slime.args)
        with self.assertRaisesRegex(TypeError, r"create_training_models\(args, pgs, rollout_manager, actor_cls=None\)"):
            placement.create_training_models(self.slime.args, groups, wandb_run_id=None)
        with self.assertRaisesRegex(TypeError, "RolloutManager"):
            placement.create_training_models(self.slime.args, groups, None)
        schedule = self.slime.importer("slime.utils.dp_schedule").build_dp_schedule
        with self.assertRaisesRegex(TypeError, "positional"):
            schedule(self.slime.args, {}, [3], 1, [0])
        with self.assertRaises(ModuleNotFoundError):
            self.slime.importer("slime.utils.wandb")

    def test_the_router_registers_in_the_background_and_checks_health_unless_told_not_to(self) -> None:
        engine = Engine()
        self.addCleanup(engine.kill)
        engine.paused = True
        checked = Router(health_checks=True, delay=0.0)
        self.addCleanup(checked.close)
        engine.register(checked.url)
        time.sleep(0.3)
        self.assertEqual(checked.urls(), [])  # a registration waits for a healthy answer
        engine.paused = False
        deadline = time.monotonic() + 10
        while not checked.urls() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(checked.urls(), [engine.url])
        # Paused (as slime pauses generation around a weight update), it is marked unhealthy.
        engine.paused = True
        while checked.health()[engine.url] and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(checked.health(), {engine.url: False})
        # With slime's settings (no health checks) the same pause changes nothing.
        unchecked = Router(delay=0.0)
        self.addCleanup(unchecked.close)
        engine.register(unchecked.url)
        while not unchecked.urls() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        self.assertEqual(unchecked.health(), {engine.url: True})

    def test_the_actor_class_travels_by_value_to_nodes_without_this_package(self) -> None:
        placement = self.slime.importer("slime.ray.placement_group")
        groups = placement.create_placement_groups(self.slime.args)
        manager, _ = placement.create_rollout_manager(self.slime.args, groups["rollout"])
        base = self.slime.importer("slime.backends.megatron_utils.actor").MegatronTrainRayActor

        def leaky_class() -> type:
            class Leaky(base):  # type: ignore[misc, valid-type]
                def train(self, rollout_id: int, rollout_data_ref: Any, external_data: Any = None) -> Any:
                    return loss_overrides(external_data)

            return Leaky

        with self.assertRaisesRegex(ModuleNotFoundError, "No module named 'dressage_megatron_worker'.*refers to loss_overrides"):
            placement.create_training_models(self.slime.args, groups, manager, actor_cls=leaky_class())
        # The worker's own class travels: its methods reach only what they name, copied.
        model, _ = placement.create_training_models(self.slime.args, groups, manager, actor_cls=dressage_actor_class(base))
        actor = model.actors[0]
        self.assertIsNot(type(actor), dressage_actor_class(base))
        self.assertIn("dressage_actor_class", dressage_actor_class(base).train.__globals__)
        self.assertNotIn("dressage_actor_class", type(actor).train.__globals__)

    def test_derived_defaults_are_slimes(self) -> None:
        # --eps-clip-high defaults to --eps-clip (arguments.py:1876).
        self.assertEqual(launch_args().eps_clip_high, 0.2)
        self.assertEqual(launch_args(eps_clip=0.3).eps_clip_high, 0.3)
        self.assertEqual(launch_args(eps_clip=0.3, eps_clip_high=0.4).eps_clip_high, 0.4)
        # train_iters is set on each actor's copy (model.py:203), never on the driver's arguments.
        placement = self.slime.importer("slime.ray.placement_group")
        groups = placement.create_placement_groups(self.slime.args)
        manager, _ = placement.create_rollout_manager(self.slime.args, groups["rollout"])
        base = self.slime.importer("slime.backends.megatron_utils.actor").MegatronTrainRayActor
        model, _ = placement.create_training_models(self.slime.args, groups, manager, actor_cls=base)
        self.assertNotIn("train_iters", vars(self.slime.args))
        self.assertEqual({vars(actor.args)["train_iters"] for actor in model.actors}, {200 * 32 * 16 // 4})

    def test_rank_data_must_hold_torch_tensors_of_slimes_dtypes(self) -> None:
        good = {
            "partition": [0], "tokens": [torch.zeros(3, dtype=torch.int64)], "response_lengths": [1],
            "rewards": [0.5], "truncated": [0], "loss_masks": [torch.ones(1, dtype=torch.int32)],
            "sample_indices": [0], "rollout_ids": [0], "rollout_mask_sums": torch.ones(1),
            "raw_reward": [1.0], "total_lengths": [3], "global_batch_sizes": [1], "num_microbatches": [1],
            "micro_batch_indices": [[0]],
        }
        check_rank_data(good, 0)
        for key, value in (
            ("tokens", [np.zeros(3, dtype=np.int64)]),
            ("loss_masks", [torch.ones(1, dtype=torch.uint8)]),
            ("rollout_mask_sums", np.ones(1, dtype=np.float32)),
            ("partition", [np.int64(0)]),
            ("dp_size", 2),
        ):
            with self.subTest(key=key), self.assertRaises((TypeError, KeyError)):
                check_rank_data({**good, key: value}, 0)
        with self.assertRaisesRegex(KeyError, "lacks"):
            check_rank_data({key: value for key, value in good.items() if key != "rollout_mask_sums"}, 0)

    def test_ray_handles_answer_only_recorded_methods_and_args_only_recorded_names(self) -> None:
        placement = self.slime.importer("slime.ray.placement_group")
        manager, _ = placement.create_rollout_manager(self.slime.args, placement.create_placement_groups(self.slime.args)["rollout"])
        with self.assertRaisesRegex(AttributeError, "not in the recorded slime API"):
            manager.update_weights.remote()
        with self.assertRaises(LookupError):
            _ = self.slime.args.dp_size
        self.assertIsInstance(self.slime.importer("ray").put(1), Ref)
        self.assertIsInstance(self.slime.importer("slime.utils.misc").Box(Ref(1)), Box)


if __name__ == "__main__":
    unittest.main()


class RoutingReplayTest(unittest.TestCase):
    """--use-rollout-routing-replay: the batch's routed experts reach the actor's rollout_data as
    slime's actor reads them, (len(tokens) - 1, num_layers, topk) int32 per sample."""

    stand_in_options: dict[str, Any] = {}

    def started(self, **args: Any) -> Started:
        started = Started(self, **{"global_batch_size": 2, **args})
        started.actor.start()
        return started

    def routed(self, packed: Any, layers: int = 3, topk: int = 2, dtype: str = "<u2") -> list[np.ndarray]:
        rows = packed.total_lengths.astype(np.int64) - 1
        return [
            (np.arange(int(count) * layers * topk) % 300 + index).astype(dtype).reshape(int(count), layers, topk)
            for index, count in enumerate(rows)
        ]

    def test_the_actor_receives_each_samples_routed_experts(self) -> None:
        started = self.started(use_rollout_routing_replay=True)
        packed = batch(MASKS, [2.0, 2.0, 1.0, 0.0])
        packed.routed_experts = self.routed(packed)
        started.actor.train(7, header(global_batch_size=2, rollout_id=7), packed, {})
        for actor in started.slime.group.actors:
            _, data, _ = actor.received[-1]
            partition = data["partition"]
            self.assertEqual(len(data["rollout_routed_experts"]), len(partition))
            for index, experts in zip(partition, data["rollout_routed_experts"]):
                self.assertEqual(experts.dtype, torch.int32)
                self.assertEqual(tuple(experts.shape), tuple(packed.routed_experts[index].shape))
                np.testing.assert_array_equal(experts.numpy(), packed.routed_experts[index].astype(np.int32))

    def test_replay_without_routed_experts_or_of_another_shape_is_refused(self) -> None:
        started = self.started(use_rollout_routing_replay=True)
        packed = batch(MASKS, [2.0, 2.0, 1.0, 0.0])
        with self.assertRaises(WorkerError) as missing:
            started.actor.train(7, header(global_batch_size=2, rollout_id=7), packed, {})
        self.assertIn("routed_experts", missing.exception.message)
        packed.routed_experts = self.routed(packed, layers=4)
        with self.assertRaises(WorkerError) as shape:
            started.actor.train(7, header(global_batch_size=2, rollout_id=7), packed, {})
        self.assertIn("--num-layers 3", shape.exception.message)
        # Nothing reached the actors.
        self.assertEqual(started.slime.group.actors[0].received, [])

    def test_the_stand_in_fails_as_slime_does_without_them(self) -> None:
        # slime's fill_routing_replay (actor.py:309), reached when the worker let a batch through.
        started = self.started(use_rollout_routing_replay=True)
        with mock.patch.object(SlimeMegatronActor, "_check_routed_experts", lambda self, batch: None):
            with self.assertRaisesRegex(ValueError, "rollout_routed_experts is required"):
                started.actor.train(7, header(global_batch_size=2, rollout_id=7), batch(MASKS, [2.0, 2.0, 1.0, 0.0]), {})

    def test_routed_experts_without_the_flag_are_refused(self) -> None:
        started = self.started()
        packed = batch(MASKS, [2.0, 2.0, 1.0, 0.0])
        packed.routed_experts = self.routed(packed)
        with self.assertRaises(WorkerError) as refused:
            started.actor.train(7, header(global_batch_size=2, rollout_id=7), packed, {})
        self.assertIn("--use-rollout-routing-replay", refused.exception.message)
