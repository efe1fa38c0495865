"""The worker started as its operators start it: `ray job submit` runs the entrypoint from Ray's job
supervisor with stdin at end of file and no terminal (as do KubeRay and `docker run` without -i)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import unittest
from pathlib import Path

import grpc

from dressage_megatron_worker.stubs import trainer_pb2, trainer_pb2_grpc

WORKER = Path(__file__).resolve().parent.parent


def start(*args: str, stdin: int | None = subprocess.DEVNULL) -> tuple[subprocess.Popen, str]:
    """`python3 -m dressage_megatron_worker ARGS` in a new session (setsid: no controlling terminal);
    returns the process once it prints where it listens."""
    child = subprocess.Popen(
        [sys.executable, "-m", "dressage_megatron_worker", "--port", "0", *args],
        cwd=WORKER,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    line = child.stdout.readline() if child.stdout else ""
    if not line.startswith("listening on "):
        child.kill()
        raise AssertionError(f"no 'listening on' line: {line!r}\n{child.communicate()[1]}")
    return child, "127.0.0.1:" + line.strip().rsplit(":", 1)[1]


def stop(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()
    child.wait()
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            stream.close()


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return trainer_pb2_grpc.TrainerServiceStub(channel).Health(trainer_pb2.HealthRequest(), timeout=10).status


class LaunchTest(unittest.TestCase):
    def test_serves_with_stdin_at_end_of_file_and_no_terminal_until_sigterm(self) -> None:
        child, address = start("--actor", "recording", "--model-name", "tiny")
        self.addCleanup(stop, child)
        self.assertEqual(os.getsid(child.pid), child.pid, "the worker runs in a session of its own")
        self.assertEqual(health(address), trainer_pb2.HealthResponse.STATUS_SERVING)
        # End of file on stdin is not a request to stop: it keeps serving until signalled.
        with self.assertRaises(subprocess.TimeoutExpired):
            child.wait(timeout=3)
        self.assertEqual(health(address), trainer_pb2.HealthResponse.STATUS_SERVING)
        child.send_signal(signal.SIGTERM)
        self.assertEqual(child.wait(timeout=30), 0)

    def test_stops_at_the_end_of_stdin_only_when_asked(self) -> None:
        child, address = start("--actor", "recording", "--stop-at-stdin-eof", stdin=subprocess.PIPE)
        self.addCleanup(stop, child)
        self.assertEqual(health(address), trainer_pb2.HealthResponse.STATUS_SERVING)
        assert child.stdin is not None
        child.stdin.close()
        self.assertEqual(child.wait(timeout=30), 0)


if __name__ == "__main__":
    unittest.main()
