import argparse
import socket
import tempfile
import types
import unittest
from pathlib import Path

from dressage_megatron_worker.dry_run import run_checks

from .slime_stand_in import Router

# The README's launch after `--`, with slime's scripts/models/qwen3.5-4B.sh expanded.
LAUNCH = [
    "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--rollout-num-gpus", "8",
    "--rollout-num-gpus-per-engine", "2", "--sglang-router-ip", "ROUTER_IP", "--sglang-router-port", "ROUTER_PORT",
    "--spec", "slime_plugins.models.qwen3_5", "get_qwen3_5_spec", "--num-layers", "32", "--hidden-size", "2560",
    "--ffn-hidden-size", "9216", "--num-attention-heads", "16", "--vocab-size", "248320",
    "--hf-checkpoint", "/models/Qwen3.5-4B", "--ref-load", "REF_LOAD", "--load", "/ckpt/qwen3.5-4b",
    "--save", "/ckpt/qwen3.5-4b",
    "--disable-rollout-global-dataset", "--rollout-batch-size", "32", "--n-samples-per-prompt", "16",
    "--num-rollout", "200", "--global-batch-size", "512", "--advantage-estimator", "grpo",
    "--no-check-for-nan-in-loss-and-grad",
]


def without_slime(name: str) -> None:
    raise ModuleNotFoundError(f"No module named {name!r}")


class DryRunTest(unittest.TestCase):
    def setUp(self) -> None:
        self.workers: list[str] = []
        self.router = Router(lambda: self.workers)
        self.addCleanup(self.router.close)
        self.url = f"http://127.0.0.1:{self.router.port}"
        # The model's torch_dist checkpoint, as --ref-load names it (a Megatron checkpoint directory).
        self.ref_load = tempfile.mkdtemp()
        Path(self.ref_load, "latest_checkpointed_iteration.txt").write_text("release")
        names = {"ROUTER_IP": "127.0.0.1", "ROUTER_PORT": str(self.router.port), "REF_LOAD": self.ref_load}
        self.argv = [names.get(item, item) for item in LAUNCH]

    def by_name(self, checks: list) -> dict:
        return {check["name"]: check for check in checks}

    def test_the_readme_launch_passes_the_recorded_rules_without_slime(self) -> None:
        checks = self.by_name(run_checks(self.argv, self.url, importer=without_slime))
        self.assertFalse(checks["slime: importable"]["ok"])
        self.assertTrue(checks["slime: arguments"]["ok"], checks["slime: arguments"]["detail"])
        self.assertIn("recorded slime API at 624b824a8", checks["slime: arguments"]["detail"])
        self.assertIn("16 GPUs (8 for Megatron, 8 for slime's engines)", checks["slime: GPUs"]["detail"])
        self.assertTrue(checks["engine: owned by slime"]["ok"], checks["engine: owned by slime"]["detail"])

    def test_names_what_slime_would_reject(self) -> None:
        argv = [item for item in self.argv if item not in ("--rollout-batch-size", "32", "--num-rollout", "200")]
        checks = self.by_name(run_checks([*argv, "--colocate"], self.url, importer=without_slime))
        detail = checks["slime: arguments"]["detail"]
        self.assertIn("missing --rollout-batch-size, --num-rollout or --num-epoch", detail)
        self.assertIn("--colocate", detail)

    def test_names_the_flags_the_worker_would_refuse(self) -> None:
        for extra, flag in (
            (["--rollout-top-p", "0.95"], "--rollout-top-p 0.95"),
            (["--release-train"], "--release-train"),
            (["--use-fault-tolerance"], "--use-fault-tolerance"),
        ):
            with self.subTest(flag=flag):
                checks = self.by_name(run_checks([*self.argv, *extra], self.url, importer=without_slime))
                self.assertFalse(checks["slime: arguments"]["ok"])
                self.assertIn(flag, checks["slime: arguments"]["detail"])
        checks = self.by_name(run_checks([*self.argv, "--rollout-top-p", "1.0"], self.url, importer=without_slime))
        self.assertTrue(checks["slime: arguments"]["ok"], checks["slime: arguments"]["detail"])

    def test_load_without_a_checkpoint_needs_ref_load_as_slimes_post_processing_decides(self) -> None:
        without_ref = [item for item in self.argv if item not in ("--ref-load", self.ref_load)]
        check = self.by_name(run_checks(without_ref, self.url, importer=without_slime))["slime: arguments"]
        self.assertFalse(check["ok"])
        self.assertIn("slime loads --ref-load, which is not set", check["detail"])
        self.assertIn("model.py:291", check["detail"])
        # With it, slime starts from --ref-load at rollout 0 while --load holds nothing.
        check = self.by_name(run_checks(self.argv, self.url, importer=without_slime))["slime: arguments"]
        self.assertTrue(check["ok"], check["detail"])
        self.assertIn(f"loads {self.ref_load} (Megatron checkpoint", check["detail"])
        # A --ref-load that is not there is named too (slime's checkpoint loader asserts it).
        missing = [item if item != self.ref_load else "/nonexistent/torch_dist" for item in self.argv]
        check = self.by_name(run_checks(missing, self.url, importer=without_slime))["slime: arguments"]
        self.assertIn("/nonexistent/torch_dist, which does not exist", check["detail"])
        # Once --load holds a checkpoint (a restart), it needs no --ref-load and says where it continues.
        save = tempfile.mkdtemp()
        Path(save, "latest_checkpointed_iteration.txt").write_text("9")
        resumed = [item if item != "/ckpt/qwen3.5-4b" else save for item in without_ref]
        check = self.by_name(run_checks(resumed, self.url, importer=without_slime))["slime: arguments"]
        self.assertTrue(check["ok"], check["detail"])
        self.assertIn(f"loads {save} (Megatron checkpoint, iteration 9: continues at the next rollout)", check["detail"])

    def test_slimes_parse_args_post_processing_is_checked_where_importable(self) -> None:
        def parse_args() -> argparse.Namespace:
            # slime_validate_args: no checkpoint in --load, so --load becomes --ref-load (None here).
            parser = argparse.ArgumentParser()
            for flag in ("--load", "--ref-load", "--sglang-router-ip", "--sglang-router-port"):
                parser.add_argument(flag)
            parsed = parser.parse_known_args()[0]
            parsed.load = parsed.ref_load
            parsed.check_for_nan_in_loss_and_grad = False
            return parsed

        slime = types.SimpleNamespace(parse_args=parse_args, __file__="/root/slime/slime/utils/arguments.py")
        argv = ["--load", "/ckpt/qwen3.5-4b", "--sglang-router-ip", "127.0.0.1"]
        check = self.by_name(run_checks(argv, self.url, importer=lambda name: slime))["slime: arguments"]
        self.assertFalse(check["ok"])
        self.assertIn("slime loads --ref-load, which is not set", check["detail"])
        check = self.by_name(run_checks([*argv, "--ref-load", self.ref_load], self.url, importer=lambda name: slime))
        self.assertTrue(check["slime: arguments"]["ok"], check["slime: arguments"]["detail"])

    def test_tells_stale_router_entries_from_live_ones(self) -> None:
        live = Router()
        self.addCleanup(live.close)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            stale = f"http://127.0.0.1:{probe.getsockname()[1]}"
        self.workers = [stale]
        check = self.by_name(run_checks(self.argv, self.url, importer=without_slime))["engine: owned by slime"]
        self.assertTrue(check["ok"], check["detail"])
        self.assertIn(f"stale (nothing answers; the start removes it): {stale}", check["detail"])
        self.workers = [stale, live.url]
        check = self.by_name(run_checks(self.argv, self.url, importer=without_slime))["engine: owned by slime"]
        self.assertFalse(check["ok"])
        self.assertIn(f"would stop the start: {live.url}", check["detail"])

    def test_runs_slimes_own_parse_args_where_importable(self) -> None:
        def parse_args() -> argparse.Namespace:
            parser = argparse.ArgumentParser()
            parser.add_argument("--rollout-batch-size", type=int, required=True)
            parser.add_argument("--sglang-router-ip")
            parser.add_argument("--sglang-router-port", type=int)
            return parser.parse_known_args()[0]

        slime = types.SimpleNamespace(parse_args=parse_args, __file__="/root/slime/slime/utils/arguments.py")
        checks = self.by_name(run_checks(["--sglang-router-ip", "127.0.0.1"], self.url, importer=lambda name: slime))
        self.assertTrue(checks["slime: importable"]["ok"])
        self.assertFalse(checks["slime: arguments"]["ok"])
        self.assertIn("the following arguments are required: --rollout-batch-size", checks["slime: arguments"]["detail"])

    def test_engine_ownership(self) -> None:
        checks = self.by_name(run_checks(self.argv, "http://10.0.0.2:8000", importer=without_slime))
        self.assertIn("the proxy routes to http://10.0.0.2:8000", checks["engine: owned by slime"]["detail"])
        no_router = [item for item in self.argv if item not in ("--sglang-router-ip", "127.0.0.1")]
        checks = self.by_name(run_checks(no_router, self.url, importer=without_slime))
        self.assertIn("a router of its own", checks["engine: owned by slime"]["detail"])
        self.workers = ["http://10.0.0.5:30000", "http://10.0.0.6:30000"]
        external = [*self.argv, "--rollout-external-engine-addrs", "10.0.0.5:30000"]
        checks = self.by_name(run_checks(external, self.url, importer=without_slime))
        self.assertFalse(checks["engine: owned by slime"]["ok"])
        self.assertIn("routed to but not updated by slime: http://10.0.0.6:30000", checks["engine: owned by slime"]["detail"])


if __name__ == "__main__":
    unittest.main()
