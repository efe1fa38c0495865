"""The training-actor class the worker hands to slime's create_training_models (`actor_cls`): slime's
MegatronTrainRayActor, plus the per-batch settings a Train call sends through `external_data`.

Each Ray actor holds its own copy of the arguments, and slime's loss reads them there (the actor's
`self.args` is the object Megatron's `get_args()` returns), so settings changed on the driver would
never reach the loss. RayTrainGroup.async_train broadcasts a dict `external_data` to every actor:
the subclass takes the settings out of it and sets them on its own arguments before training."""

from __future__ import annotations

from typing import Any

SETTINGS_KEY = "dressage_settings"


def dressage_actor_class(base: type) -> type:
    """A subclass of `base` (slime's MegatronTrainRayActor). Defined inside this function so Ray
    pickles it by value: the training nodes need slime, not this package."""

    class DressageMegatronTrainRayActor(base):  # type: ignore[misc, valid-type]
        def train(self, rollout_id: int, rollout_data_ref: Any, external_data: Any = None) -> Any:
            if isinstance(external_data, dict) and SETTINGS_KEY in external_data:
                for name, value in external_data[SETTINGS_KEY].items():
                    setattr(self.args, name, value)
                external_data = None
            return super().train(rollout_id, rollout_data_ref, external_data=external_data)

    return DressageMegatronTrainRayActor
