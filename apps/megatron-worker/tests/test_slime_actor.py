import types
import unittest
from typing import Any

from dressage_megatron_worker.actors import SlimeMegatronActor, loss_overrides
from dressage_megatron_worker.packed_batch import BatchAssembler
from dressage_megatron_worker.stubs import trainer_pb2
from dressage_megatron_worker.synthetic import expected_fields

from .helpers import chunks


class FakeActorModel:
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def async_train(self, rollout_id: int, refs: list) -> str:
        self.calls.append(("async_train", rollout_id, refs))
        return "handle"

    def update_weights(self) -> None:
        self.calls.append(("update_weights",))

    def save_model(self, rollout_id: int) -> None:
        self.calls.append(("save_model", rollout_id))


def fake_slime(calls: list) -> dict[str, Any]:
    """Stand-ins for the slime, Ray and Megatron entry points the actor touches."""

    def create_training_models(args: Any, groups: Any, wandb_run_id: Any) -> tuple:
        calls.append(("create_training_models", groups))
        return FakeActorModel(calls), None

    def build_dp_schedule(args, config, total_lengths, global_batch_size, rollout_indices):
        calls.append(("build_dp_schedule", config, global_batch_size))
        count = len(total_lengths)
        ranks = config["dp_size"]
        return types.SimpleNamespace(
            partitions=[list(range(rank, count, ranks)) for rank in range(ranks)],
            micro_batch_indices=[[[i] for i in range(len(range(rank, count, ranks)))] for rank in range(ranks)],
            num_microbatches=[count // ranks],
            global_batch_sizes=[global_batch_size],
        )

    class Box:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

    return {
        "ray": types.SimpleNamespace(put=lambda value: ("ref", value), get=lambda handle: calls.append(("get", handle))),
        "slime.ray.placement_group": types.SimpleNamespace(
            create_placement_groups=lambda args: "groups", create_training_models=create_training_models
        ),
        "slime.utils.dp_schedule": types.SimpleNamespace(build_dp_schedule=build_dp_schedule),
        "slime.utils.misc": types.SimpleNamespace(Box=Box),
    }


class SlimeActorTest(unittest.TestCase):
    def test_train_splits_over_data_parallel_ranks_and_calls_async_train(self) -> None:
        calls: list = []
        modules = fake_slime(calls)
        args = types.SimpleNamespace(dp_size=2, context_parallel_size=1, eps_clip=0.2)
        actor = SlimeMegatronActor(args, importer=modules.__getitem__)
        assembler = BatchAssembler()
        loss = trainer_pb2.LossConfig(eps_clip=0.1, learning_rate=1e-6)
        for chunk in chunks(expected_fields(8, 32, 10), rollout_id=3, global_batch_size=2, loss=loss):
            assembler.push(chunk)
        header, batch = assembler.finish()
        result = actor.train(header.rollout_id, header, batch, loss_overrides(header.loss))
        self.assertEqual((args.eps_clip, args.lr), (0.1, 1e-6))
        names = [call[0] for call in calls]
        self.assertEqual(names, ["create_training_models", "build_dp_schedule", "async_train", "get"])
        _, rollout_id, refs = calls[2]
        self.assertEqual(rollout_id, 3)
        self.assertEqual(len(refs), 2)
        rank0 = refs[0].inner[1]
        self.assertEqual(rank0["partition"], [0, 2, 4, 6])
        self.assertEqual(len(rank0["tokens"]), 4)
        self.assertEqual(len(rank0["total_lengths"]), 8)  # unsliced, like slime's
        # (i mod 11 + 1) / 8 scaled by 8 so the smallest is 1; sample 4 has no trainable token, so 0.
        self.assertEqual(rank0["rollout_mask_sums"].tolist(), [1.0, 3.0, 0.0, 7.0])
        self.assertEqual(result.metrics["denominator_scale"], 8.0)
        self.assertEqual(result.optimizer_steps, 1)

    def test_weights_and_checkpoints_go_through_the_actor_model(self) -> None:
        calls: list = []
        actor = SlimeMegatronActor(types.SimpleNamespace(dp_size=1), importer=fake_slime(calls).__getitem__)
        self.assertEqual(actor.update_weights("", []), ("1", 0))
        actor.save_checkpoint("", 4)
        self.assertIn(("update_weights",), calls)
        self.assertIn(("save_model", 4), calls)

    def test_nothing_of_slime_is_imported_before_start(self) -> None:
        imported: list[str] = []
        SlimeMegatronActor(types.SimpleNamespace(), importer=lambda name: imported.append(name))
        self.assertEqual(imported, [])


if __name__ == "__main__":
    unittest.main()
