"""The router is started with slime's own settings, and the READMEs give exactly that command."""

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from dressage_megatron_worker import slime_api
from dressage_megatron_worker.router_launch import router_command

WORKER = Path(__file__).resolve().parent.parent
READMES = (WORKER / "README.md", WORKER.parent / "trainer" / "recipes" / "cluster" / "README.md")


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\\\n", " "))


class RouterLaunchTest(unittest.TestCase):
    def test_the_settings_are_slimes(self) -> None:
        command = router_command("0.0.0.0", 8000)
        pairs = {flag: command[i + 1] for i, flag in enumerate(command[:-1]) if flag.startswith("--")}
        # slime: --sglang-router-request-timeout-secs default 14400 (sglang-router's own: 1800).
        self.assertEqual(pairs["--request-timeout-secs"], "14400")
        self.assertEqual((pairs["--balance-abs-threshold"], pairs["--balance-rel-threshold"]), ("10", "1.2"))
        self.assertIn("--disable-circuit-breaker", command)
        self.assertIn("--disable-health-check", command)
        cited = {entry["source"] for entry in slime_api.manifest()["cited"]["lines"].values()}
        for line in (
            "router_args.request_timeout_secs = args.sglang_router_request_timeout_secs",
            "router_args.disable_circuit_breaker = True",
            "router_args.disable_health_check = True",
            "default=14400,",
            "parser.set_defaults(router_balance_abs_threshold=10, router_balance_rel_threshold=1.2)",
        ):
            self.assertIn(line, cited)

    def test_the_readmes_give_the_same_command(self) -> None:
        expected = " ".join(router_command("0.0.0.0", 8000))
        for readme in READMES:
            with self.subTest(readme=readme.name):
                text = one_line(readme.read_text())
                self.assertIn(expected, text)
                # No other launch of the router (with sglang-router's defaults) is left.
                self.assertEqual(text.count("sglang_router.launch_router --host"), text.count(expected))

    def test_the_launcher_runs_the_command(self) -> None:
        directory = tempfile.mkdtemp()
        recorder = Path(directory) / "python"
        recorder.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
        recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
        run = subprocess.run(
            [sys.executable, "-m", "dressage_megatron_worker.router_launch", "--python", str(recorder), "--host", "0.0.0.0",
             "--port", "8000"],
            cwd=WORKER, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(WORKER)},
        )
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(json.loads(run.stdout), router_command("0.0.0.0", 8000)[1:])


if __name__ == "__main__":
    unittest.main()
