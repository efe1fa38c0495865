"""Loads the TrainerService stubs generated from trainer.proto (scripts/generate-stubs.sh)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

APP_ROOT = Path(__file__).resolve().parent.parent
GENERATED = APP_ROOT / "build" / "gen"


def _ensure_generated() -> None:
    if (GENERATED / "dressage" / "trainer" / "v1" / "trainer_pb2_grpc.py").exists():
        return
    # Generated on first use so a fresh checkout runs without a separate build step.
    subprocess.run(["sh", str(APP_ROOT / "scripts" / "generate-stubs.sh")], check=True)


def load() -> tuple[ModuleType, ModuleType]:
    """Returns (trainer_pb2, trainer_pb2_grpc)."""
    _ensure_generated()
    if str(GENERATED) not in sys.path:
        sys.path.insert(0, str(GENERATED))
    messages = importlib.import_module("dressage.trainer.v1.trainer_pb2")
    services = importlib.import_module("dressage.trainer.v1.trainer_pb2_grpc")
    return messages, services


trainer_pb2, trainer_pb2_grpc = load()
