"""The training-actor class the worker hands to slime's create_training_models (`actor_cls`): slime's
MegatronTrainRayActor, plus the per-batch settings a Train call sends through `external_data`.

Each Ray actor holds its own copy of the arguments, and slime's loss reads them there (the actor's
`self.args` is the object Megatron's `get_args()` returns), so settings changed on the driver would
never reach the loss. RayTrainGroup.async_train broadcasts a dict `external_data` to every actor:
the subclass takes the settings out of it and sets them on its own arguments before training."""

from __future__ import annotations

import json
import math
import os
from typing import Any

SETTINGS_KEY = "dressage_settings"
# What the subclass's train() returns: the steps slime skipped because the gradient was not finite.
SKIPPED_KEY = "nonfinite_step_skipped"
# Written by every rank into the iter_NNNNNNN directory Megatron saved: the engines' weight version
# at that checkpoint, so that a worker restarted with --load continues slime's version numbers.
CHECKPOINT_STATE = "dressage-checkpoint.json"
# What the subclass's save_model() returns: {path relative to --save: size} of the files this rank sees.
FILES_KEY = "dressage_checkpoint_files"


def dressage_actor_class(base: type) -> type:
    """A subclass of `base` (slime's MegatronTrainRayActor). Defined inside this function so Ray
    pickles it by value: the training nodes need slime, not this package."""

    class DressageMegatronTrainRayActor(base):  # type: ignore[misc, valid-type]
        def init(self, args: Any, *rest: Any, **options: Any) -> Any:
            # slime starts the engines' version counter at args.update_weight_start_version
            # (actor.py:183; 0 on a fresh start). From a checkpoint this worker saved, start where
            # that run's versions stood, read on this rank's own view of --load (which may be
            # rank-local storage the driver never sees).
            load = getattr(args, "load", None)
            if load:
                try:
                    # Megatron's --ckpt-step picks an iteration; else the tracker file names the latest.
                    iteration = vars(args).get("ckpt_step")
                    if iteration is None:
                        with open(os.path.join(load, "latest_checkpointed_iteration.txt")) as handle:
                            iteration = int(handle.read().strip())
                    with open(os.path.join(load, f"iter_{iteration:07d}", CHECKPOINT_STATE)) as handle:
                        args.update_weight_start_version = int(json.load(handle)["weight_version"])
                except (OSError, ValueError, KeyError):
                    pass
            return super().init(args, *rest, **options)

        def save_model(self, rollout_id: int, force_sync: bool = False) -> Any:
            super().save_model(rollout_id, force_sync=force_sync)
            save = getattr(self.args, "save", None)
            if not save:
                return None
            directory = os.path.join(save, f"iter_{rollout_id:07d}")
            updater = getattr(self, "weight_updater", None)
            state = {"rollout_id": rollout_id, "weight_version": int(getattr(updater, "weight_version", 0) or 0)}
            # Every rank writes the same content (one copy per node when --save is node-local),
            # each through its own temporary name and an atomic rename.
            partial = os.path.join(directory, f".{CHECKPOINT_STATE}.{os.getpid()}.{id(self)}")
            with open(partial, "w") as handle:
                json.dump(state, handle)
            os.replace(partial, os.path.join(directory, CHECKPOINT_STATE))
            # The driver may not see this rank's --save (node-local disks): each rank reports what it sees.
            files = {}
            for folder, _, names in os.walk(directory):
                for name in names:
                    if name.startswith(f".{CHECKPOINT_STATE}."):
                        continue  # another rank's state file being written
                    path = os.path.join(folder, name)
                    try:
                        files[os.path.relpath(path, save)] = os.path.getsize(path)
                    except OSError:
                        pass
            return {FILES_KEY: files}

        def train(self, rollout_id: int, rollout_data_ref: Any, external_data: Any = None) -> Any:
            if isinstance(external_data, dict) and SETTINGS_KEY in external_data:
                for name, value in external_data[SETTINGS_KEY].items():
                    setattr(self.args, name, value)
                external_data = None
            self._dressage_skipped = 0
            self._dressage_watch_steps()
            super().train(rollout_id, rollout_data_ref, external_data=external_data)
            # The actor role returns None to slime; the worker reads this instead.
            return {SKIPPED_KEY: self._dressage_skipped}

        def _dressage_watch_steps(self) -> None:
            """Counts the steps slime's train_one_step skips: with the NaN check off it asks the
            optimizer `prepare_grads()` (True: inf or NaN found) and then `get_grad_norm()`, and
            steps only when the first is False and the norm finite."""
            optimizer = self.optimizer
            if getattr(optimizer, "_dressage_watched", False):
                return
            prepare_grads, get_grad_norm = optimizer.prepare_grads, optimizer.get_grad_norm

            def watched_prepare_grads() -> Any:
                found_inf = prepare_grads()
                if found_inf:
                    self._dressage_skipped += 1
                return found_inf

            def watched_get_grad_norm() -> Any:
                norm = get_grad_norm()
                if not math.isfinite(float(norm)):
                    self._dressage_skipped += 1
                return norm

            optimizer.prepare_grads = watched_prepare_grads
            optimizer.get_grad_norm = watched_get_grad_norm
            optimizer._dressage_watched = True

    return DressageMegatronTrainRayActor
