import unittest

from dressage_megatron_worker.dp_schedule import build_dp_schedule


class DataParallelScheduleTest(unittest.TestCase):
    """The port of slime's build_dp_schedule keeps slime's invariants."""

    def test_rollouts_stay_whole_and_ranks_get_equal_micro_batch_counts(self) -> None:
        lengths = [10, 30, 5, 5, 20, 8, 8, 40, 3]
        rollouts = [0, 0, 1, 2, 2, 3, 4, 5, 6]
        schedule = build_dp_schedule(lengths, rollouts, global_batch_size=3, dp_size=2, max_tokens_per_micro_batch=32)
        self.assertEqual(schedule.global_batch_sizes, [3, 3])
        # Rollout 6 is the seventh: trailing rollouts beyond whole steps are dropped.
        kept = sorted(index for partition in schedule.partitions for index in partition)
        self.assertEqual(kept, list(range(8)))
        for rank in range(2):
            flat = [index for micro in schedule.micro_batch_indices[rank] for index in micro]
            self.assertEqual(flat, list(range(len(schedule.partitions[rank]))))
            self.assertEqual(len(schedule.micro_batch_indices[rank]), sum(schedule.num_microbatches))
            for micro in schedule.micro_batch_indices[rank]:
                samples = [schedule.partitions[rank][index] for index in micro]
                self.assertLessEqual(sum(lengths[i] for i in samples), max(32, max(lengths[i] for i in samples)))
        # Samples 0 and 1 (one rollout) land in the same step.
        step_of = {}
        for rank in range(2):
            position = 0
            for step, count in enumerate(schedule.num_microbatches):
                for micro in schedule.micro_batch_indices[rank][position : position + count]:
                    for index in micro:
                        step_of[schedule.partitions[rank][index]] = step
                position += count
        self.assertEqual(step_of[0], step_of[1])
        self.assertEqual(step_of[3], step_of[4])

    def test_slime_refusals(self) -> None:
        with self.assertRaises(ValueError):
            build_dp_schedule([4, 4], [0, 1], global_batch_size=3, dp_size=1)
        with self.assertRaises(ValueError):
            build_dp_schedule([4], [0], global_batch_size=1, dp_size=2, max_tokens_per_micro_batch=8)
        with self.assertRaisesRegex(ValueError, "static path"):
            build_dp_schedule([4, 4, 4], [0, 1, 2], global_batch_size=3, dp_size=2)
        # Three single-sample micro-batches cannot be split into four (dp_schedule.py:172).
        with self.assertRaisesRegex(ValueError, "could only produce 3 mbs after maximal splitting; need 4"):
            build_dp_schedule([4, 4, 4], [0, 1, 2], global_batch_size=3, dp_size=2, max_tokens_per_micro_batch=4)
        # Under virtual pipelining the count aligns to dp_size × the micro-batch group.
        with self.assertRaisesRegex(ValueError, r"multiple of dp_size \* mb_group \(4\)"):
            build_dp_schedule([4, 4], [0, 1], global_batch_size=2, dp_size=2, vpp_size=2, microbatch_group_size_per_vp_stage=2)
        schedule = build_dp_schedule([2] * 4, [0, 1, 2, 3], global_batch_size=4, dp_size=2, max_tokens_per_micro_batch=2, cp_size=2)
        self.assertEqual(schedule.num_microbatches, [1])


if __name__ == "__main__":
    unittest.main()
