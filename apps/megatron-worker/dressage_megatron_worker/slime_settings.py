"""The slime arguments a Train call sets on the training actors: the client's LossConfig overrides
and the loss-scale compensation of the rescaled denominators. Each actor holds its own copy of the
arguments (pickled at init), so these travel with every batch and are applied inside the actors;
settings slime reads only when the actors start are refused unless they keep their launch value."""

from __future__ import annotations

from typing import Any

import grpc

from .errors import WorkerError, invalid

# slime's argument name for each LossConfig field.
LOSS_FLAGS = {
    "advantage_estimator": "advantage_estimator",
    "eps_clip": "eps_clip",
    "eps_clip_high": "eps_clip_high",
    "eps_clip_c": "eps_clip_c",
    "use_tis": "use_tis",
    "tis_clip": "tis_clip",
    "tis_clip_low": "tis_clip_low",
    "use_kl_loss": "use_kl_loss",
    "kl_loss_coef": "kl_loss_coef",
    "kl_loss_type": "kl_loss_type",
    "entropy_coef": "entropy_coef",
    "calculate_per_token_loss": "calculate_per_token_loss",
    "learning_rate": "lr",
    "use_rollout_logprobs": "use_rollout_logprobs",
}

# Read by slime's loss at every step (slime/backends/megatron_utils/loss.py, actor.py).
PER_STEP = (
    "advantage_estimator",
    "eps_clip",
    "eps_clip_high",
    "eps_clip_c",
    "use_tis",
    "tis_clip",
    "tis_clip_low",
    "kl_loss_coef",
    "kl_loss_type",
    "entropy_coef",
    "use_rollout_logprobs",
)
# Fixed when the actors start: lr builds the optimizer's scheduler, use_kl_loss decides whether the
# reference model is loaded, calculate_per_token_loss configures Megatron's gradient reduction.
AT_START = {
    "lr": "the optimizer's learning-rate schedule is built when the actors start",
    "use_kl_loss": "the reference model is loaded only when the actors start with --use-kl-loss",
    "calculate_per_token_loss": "Megatron's gradient reduction is configured when the actors start",
}
# Estimators whose advantages are the (post-processed) rewards, linearly: scaling the rewards by s
# scales the policy-gradient term by s exactly. ppo needs slime's critic, which the worker does not run.
LINEAR_ESTIMATORS = {"grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"}


def loss_overrides(loss_config: Any) -> dict[str, Any]:
    """The LossConfig fields the client set, as slime argument names."""
    return {flag: getattr(loss_config, name) for name, flag in LOSS_FLAGS.items() if loss_config.HasField(name)}


def _refuse(message: str) -> WorkerError:
    return WorkerError(grpc.StatusCode.FAILED_PRECONDITION, message)


def batch_settings(launch: Any, overrides: dict[str, Any], denominator_scale: float) -> dict[str, Any]:
    """The per-step arguments of one batch: launch values, this batch's overrides (nothing carries
    over to the next batch), and the coefficients scaled with the denominators.

    Denominators below 1 are multiplied by `denominator_scale` (rollout_data.py) because slime's
    reducer clamps them at 1. The worker multiplies the rewards by the same factor and the entropy
    and KL-loss coefficients too, so every term of slime's loss, hence the gradient, the norm
    `--clip-grad` clips and the logged gradient norm, is exactly what the true denominators give."""
    for name, value in overrides.items():
        if name in AT_START and value != getattr(launch, name, None):
            raise _refuse(
                f"loss.{next(field for field, flag in LOSS_FLAGS.items() if flag == name)} = {value!r} differs from "
                f"the worker's --{name.replace('_', '-')} {getattr(launch, name, None)!r}: {AT_START[name]}; "
                "restart the worker with the new value"
            )
    settings = {name: getattr(launch, name, None) for name in PER_STEP}
    settings.update({name: value for name, value in overrides.items() if name in PER_STEP})
    if "eps_clip" in overrides and "eps_clip_high" not in overrides:
        # slime derives the upper clip from the lower one when it is not given
        # (slime/utils/arguments.py:1876-1877), as the TypeScript trainers do per batch.
        settings["eps_clip_high"] = settings["eps_clip"]
    check_combination(settings, launch)
    if settings["advantage_estimator"] not in LINEAR_ESTIMATORS:
        raise _refuse(
            f"advantage_estimator {settings['advantage_estimator']!r} is not supported by this worker "
            f"(one of {', '.join(sorted(LINEAR_ESTIMATORS))})"
        )
    if denominator_scale != 1.0:
        blockers = {
            "--kl-coef": float(getattr(launch, "kl_coef", 0.0) or 0.0) != 0.0,
            "--normalize-advantages": bool(getattr(launch, "normalize_advantages", False)),
            "--use-opd": bool(getattr(launch, "use_opd", False)),
            "--custom-advantage-function-path": getattr(launch, "custom_advantage_function_path", None) is not None,
            "--loss-type other than policy_loss": getattr(launch, "loss_type", "policy_loss") != "policy_loss",
        }
        active = [name for name, on in blockers.items() if on]
        if active:
            raise _refuse(
                f"loss denominators below 1 need a loss scale of {denominator_scale:g}, which the worker folds "
                f"into the rewards; that is exact only without {', '.join(active)}"
            )
        for name in ("entropy_coef", "kl_loss_coef"):
            if settings[name] is not None:
                settings[name] = float(settings[name]) * denominator_scale
    return settings


def check_combination(settings: dict[str, Any], launch: Any) -> None:
    """The start-up assertions of slime's slime_validate_args (slime/utils/arguments.py:1848-1855)
    on one batch's settings: an override slime would have refused as a flag is refused here.
    @raises WorkerError INVALID_ARGUMENT naming the `loss.*` field."""
    estimator = settings["advantage_estimator"]
    if estimator in ("reinforce_plus_plus", "reinforce_plus_plus_baseline") and not getattr(
        launch, "normalize_advantages", False
    ):
        raise invalid(
            f"loss.advantage_estimator {estimator!r} needs advantage normalization, which slime turns on only "
            "at start: restart the worker with --normalize-advantages (slime refuses the estimator without it)"
        )
    if settings["use_rollout_logprobs"] and settings["use_tis"]:
        raise invalid("loss.use_rollout_logprobs and loss.use_tis cannot both be set (slime refuses the combination)")


def scaled_rewards(rewards: list[float], denominator_scale: float) -> list[float]:
    return rewards if denominator_scale == 1.0 else [reward * denominator_scale for reward in rewards]
