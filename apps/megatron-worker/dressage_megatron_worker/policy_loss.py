"""slime's policy loss (`loss.py policy_loss_function`, `ppo_utils.compute_policy_loss`,
`compute_approx_kl`, `vanilla_tis_function`) over per-token torch tensors: PPO clip with
`eps_clip`/`eps_clip_high`, the dual clip `eps_clip_c`, truncated importance sampling against the
rollout logprobs, the KL loss (k1, k2, k3, low_var_kl) and the entropy bonus;
`loss = pg_loss − entropy_coef·entropy_loss + kl_loss_coef·kl_loss`.

Reduction is a weighted sum with per-token weights computed once for the whole optimizer step
(`reducer_weights`): per rollout, `mask / d_i / global_batch_size` with the exact denominator `d_i`
the batch carries (never slime's `max(d_i, 1)`, which breaks prompt-equal weighting below 1); per
token, `mask / trainable tokens of the step`. Partial sums over micro-batches and data-parallel
ranks then add up to the step's loss. Mirrors `@dressage/trainer-bridge`'s float64 reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import torch

from .errors import WorkerError, invalid

KL_TYPES = ("k1", "k2", "k3", "low_var_kl")


@dataclass(frozen=True)
class LossOptions:
    """slime's flags with its defaults (`resolvePolicyLossOptions` of the TypeScript side)."""

    eps_clip: float = 0.2
    eps_clip_high: float | None = None
    eps_clip_c: float | None = None
    use_tis: bool = False
    tis_clip: float = 2.0
    tis_clip_low: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_loss_type: str = "k1"
    entropy_coef: float = 0.0
    calculate_per_token_loss: bool = False
    use_rollout_logprobs: bool = False

    @property
    def clip_high(self) -> float:
        return self.eps_clip if self.eps_clip_high is None else self.eps_clip_high


def resolve_options(fields: dict[str, Any]) -> LossOptions:
    """Options from a LossConfig's set fields (proto names), checked like the TypeScript side:
    finite, non-negative clip ranges and coefficients, a known KL type, dual clip > 1, TIS bounds
    in order and not combined with use_rollout_logprobs.
    @raises WorkerError INVALID_ARGUMENT naming the `loss.*` field."""
    known = {name for name in LossOptions.__dataclass_fields__}
    options = LossOptions(**{name: value for name, value in fields.items() if name in known})
    for name in ("eps_clip", "eps_clip_high", "eps_clip_c", "tis_clip", "tis_clip_low", "kl_loss_coef", "entropy_coef"):
        value = getattr(options, name)
        minimum = -np.inf if name == "entropy_coef" else 0.0
        if value is not None and not (np.isfinite(value) and value >= minimum):
            raise invalid(f"loss.{name} must be a finite number{' ≥ 0' if minimum == 0 else ''}, got {value}")
    if options.kl_loss_type not in KL_TYPES:
        raise invalid(f'loss.kl_loss_type: unknown KL loss type "{options.kl_loss_type}"; expected k1, k2, k3 or low_var_kl')
    if options.eps_clip_c is not None and not options.eps_clip_c > 1:
        raise invalid(f"loss.eps_clip_c: the dual-clip constant must be greater than 1, got {options.eps_clip_c}")
    if options.use_tis and options.use_rollout_logprobs:
        raise invalid("loss.use_tis cannot be combined with loss.use_rollout_logprobs: the TIS weight would always be 1")
    if options.tis_clip_low > options.tis_clip:
        raise invalid(f"loss.tis_clip_low ({options.tis_clip_low}) is above loss.tis_clip ({options.tis_clip})")
    return options


def check_denominators(denominators: np.ndarray, trainable: np.ndarray) -> None:
    """A sample with trainable tokens needs a positive, finite denominator (exact division)."""
    bad = (trainable > 0) & ~(np.isfinite(denominators) & (denominators > 0))
    if np.any(bad):
        sample = int(np.argmax(bad))
        raise invalid(
            f"sample {sample} has {int(trainable[sample])} trainable tokens but loss denominator "
            f"{denominators[sample]}; rollout_mask_sums must be positive where the loss mask is not all zero"
        )


def reducer_weights(
    response_lengths: np.ndarray,
    loss_masks: np.ndarray,
    denominators: np.ndarray,
    per_token: bool,
    global_batch_size: int,
    token_normalizer: float,
) -> np.ndarray:
    """float64 per-token weights of slime's reducers (see the module doc), over the concatenated
    responses of `response_lengths`."""
    masks = np.asarray(loss_masks, dtype=np.float64)
    if per_token:
        return masks / token_normalizer if token_normalizer > 0 else np.zeros_like(masks)
    lengths = np.asarray(response_lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    running = np.concatenate(([0.0], np.cumsum(masks)))
    trainable = running[ends] - running[ends - lengths]
    denominators = np.asarray(denominators, dtype=np.float64)
    check_denominators(denominators, trainable)
    safe = np.where(trainable > 0, denominators, 1.0)
    per_sample = np.where(trainable > 0, 1.0 / safe / global_batch_size, 0.0)
    return masks * np.repeat(per_sample, lengths)


def approximate_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kind: str) -> torch.Tensor:
    log_ratio = log_probs - ref_log_probs
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return log_ratio**2 / 2.0
    kl = torch.exp(-log_ratio) - 1 + log_ratio
    return torch.clamp(kl, -10, 10) if kind == "low_var_kl" else kl


def policy_loss(
    options: LossOptions,
    weights: torch.Tensor,
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor | None = None,
    rollout_log_probs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    ref_log_probs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss (differentiable through `log_probs` and `entropy`) and its metrics, each reduced
    with `weights`. `old_log_probs` defaults to the rollout logprobs under use_rollout_logprobs,
    else to the detached current ones (slime's reuse when a rollout trains in a single step)."""
    if (options.use_tis or options.use_rollout_logprobs) and rollout_log_probs is None:
        raise invalid("loss.use_tis and loss.use_rollout_logprobs need the batch's rollout_log_probs")
    if options.use_kl_loss and ref_log_probs is None:
        raise WorkerError(grpc.StatusCode.FAILED_PRECONDITION, "loss.use_kl_loss needs reference logprobs")

    def reduce(values: torch.Tensor) -> torch.Tensor:
        return (values * weights).sum()

    if options.use_rollout_logprobs:
        old = rollout_log_probs
    elif old_log_probs is not None:
        old = old_log_probs
    else:
        old = log_probs.detach()
    ppo_kl = old - log_probs
    ratio = torch.exp(-ppo_kl)
    loss1 = -ratio * advantages
    loss2 = -torch.clamp(ratio, 1 - options.eps_clip, 1 + options.clip_high) * advantages
    pg = torch.maximum(loss1, loss2)
    metrics: dict[str, torch.Tensor] = {
        "pg_clipfrac": reduce((loss2 > loss1).to(log_probs.dtype)),
        "ppo_kl": reduce(ppo_kl.detach()),
    }
    if options.eps_clip_c is not None:
        pg = torch.where(advantages < 0, torch.minimum(-options.eps_clip_c * advantages, pg), pg)
    if options.use_tis:
        raw = torch.exp(old - rollout_log_probs).detach()
        weight = torch.clamp(raw, options.tis_clip_low, options.tis_clip)
        pg = pg * weight
        metrics["tis"] = reduce(raw)
        metrics["tis_clipfrac"] = reduce((weight != raw).to(log_probs.dtype))
        metrics["tis_abs"] = reduce((raw - 1).abs())
        metrics["ois"] = reduce(ratio.detach())
    if rollout_log_probs is not None:
        metrics["train_rollout_logprob_abs_diff"] = reduce((old - rollout_log_probs).abs().detach())
    pg_loss = reduce(pg)
    entropy_loss = reduce(entropy) if entropy is not None else torch.zeros((), dtype=log_probs.dtype)
    loss = pg_loss - options.entropy_coef * entropy_loss
    if options.use_kl_loss:
        kl_loss = reduce(approximate_kl(log_probs, ref_log_probs, options.kl_loss_type))
        metrics["kl_loss"] = kl_loss.detach()
        loss = loss + options.kl_loss_coef * kl_loss
    metrics["pg_loss"] = pg_loss.detach()
    metrics["entropy_loss"] = entropy_loss.detach()
    metrics["loss"] = loss.detach()
    return loss, metrics


def sft_loss(weights: torch.Tensor, log_probs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The masked negative log-likelihood with the same reducers (the supervised warm-start)."""
    loss = -(log_probs * weights).sum()
    return loss, {"loss": loss.detach(), "sft_loss": loss.detach()}
