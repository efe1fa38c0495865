"""The worker's TrainerService over the slime actor against the stand-ins (tests/slime_stand_in.py), in
a process of its own, for tests written on the other side of the wire. After every Train it writes
what the training actors received as JSON to RECORD (rollout_routed_experts: shape, dtype, ids).

    python3 -m tests.serve_stand_ins RECORD [NAME=VALUE ...]   (slime arguments, JSON values)
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from dressage_megatron_worker.server import create_server
from dressage_megatron_worker.service import TrainerService
from dressage_megatron_worker.slime_actor import SlimeMegatronActor

from .slime_stand_in import Slime, launch_args


def received(slime: Slime) -> list[dict[str, Any]]:
    """Per actor rank, its last rollout_data's routed experts."""
    out = []
    for actor in slime.group.actors:
        rollout_id, data, _ = actor.received[-1]
        routed = data.get("rollout_routed_experts")
        out.append(
            {
                "rank": actor.rank,
                "rollout_id": rollout_id,
                "tokens": [tokens.tolist() for tokens in data["tokens"]],
                "rollout_routed_experts": None
                if routed is None
                else [
                    {"shape": list(item.shape), "dtype": str(item.dtype), "ids": item.flatten().tolist()}
                    for item in routed
                ],
            }
        )
    return out


def main(argv: list[str]) -> int:
    record = argv[0]
    overrides = {name: json.loads(value) for name, value in (item.split("=", 1) for item in argv[1:])}
    slime = Slime(launch_args(**overrides))
    actor = SlimeMegatronActor(slime.args, importer=slime.importer)
    actor.start()
    train = actor.train

    def recording_train(*args: Any, **kwargs: Any) -> Any:
        result = train(*args, **kwargs)
        with open(record, "w") as handle:
            json.dump(received(slime), handle)
        return result

    actor.train = recording_train  # type: ignore[method-assign]
    server, port = create_server(TrainerService(actor))
    print(f"listening on 127.0.0.1:{port}", flush=True)
    # Stops when the parent closes stdin (a test process that dies takes this one with it).
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()
    server.stop(grace=1).wait()
    actor.close()
    slime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
