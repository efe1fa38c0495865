"""The training-actor class the worker hands to slime's create_training_models (`actor_cls`): slime's
MegatronTrainRayActor, plus the per-batch settings a Train call sends through `external_data`.

Each Ray actor holds its own copy of the arguments, and slime's loss reads them there (the actor's
`self.args` is the object Megatron's `get_args()` returns), so settings changed on the driver would
never reach the loss. RayTrainGroup.async_train broadcasts a dict `external_data` to every actor:
the subclass takes the settings out of it and sets them on its own arguments before training."""

from __future__ import annotations

import math
from typing import Any

SETTINGS_KEY = "dressage_settings"
# What the subclass's train() returns: the steps slime skipped because the gradient was not finite.
SKIPPED_KEY = "nonfinite_step_skipped"


def dressage_actor_class(base: type) -> type:
    """A subclass of `base` (slime's MegatronTrainRayActor). Defined inside this function so Ray
    pickles it by value: the training nodes need slime, not this package."""

    class DressageMegatronTrainRayActor(base):  # type: ignore[misc, valid-type]
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
