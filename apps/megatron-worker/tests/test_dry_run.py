import argparse
import socket
import types
import unittest

from dressage_megatron_worker.dry_run import run_checks

from .slime_stand_in import Router

# The README's launch after `--`, with slime's scripts/models/qwen3.5-4B.sh expanded.
LAUNCH = [
    "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--rollout-num-gpus", "8",
    "--rollout-num-gpus-per-engine", "2", "--sglang-router-ip", "ROUTER_IP", "--sglang-router-port", "ROUTER_PORT",
    "--spec", "slime_plugins.models.qwen3_5", "get_qwen3_5_spec", "--num-layers", "32", "--hidden-size", "2560",
    "--ffn-hidden-size", "9216", "--num-attention-heads", "16", "--vocab-size", "248320",
    "--hf-checkpoint", "/models/Qwen3.5-4B", "--load", "/ckpt/qwen3.5-4b", "--save", "/ckpt/qwen3.5-4b",
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
        self.argv = [{"ROUTER_IP": "127.0.0.1", "ROUTER_PORT": str(self.router.port)}.get(item, item) for item in LAUNCH]

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
