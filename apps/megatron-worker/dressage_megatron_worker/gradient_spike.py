"""The gradient-spike clip (LossConfig.clip_grad_spike), as `@dressage/trainer-bridge`'s
`gradient-spike-clip.ts` computes it: a policy-loss step whose global gradient norm exceeds
`factor` times the median norm of the last 20 policy-loss steps is scaled down to that limit, once
5 steps of history exist. Zero and non-finite norms are not recorded. Adam would otherwise turn one
rare large gradient into a coherent step of about lr / sqrt(1 - beta2) per weight, which its
momentum repeats over the next steps."""

from __future__ import annotations

import math
import statistics

from .errors import invalid

WINDOW = 20
MIN_HISTORY = 5


def check_factor(factor: float) -> float:
    """The factor, checked: a finite number greater than 1."""
    if not (math.isfinite(factor) and factor > 1):
        raise invalid(
            f"loss.clip_grad_spike must be a number greater than 1 (a multiple of the median gradient norm), got {factor}"
        )
    return float(factor)


class GradientSpikeClip:
    """Recent policy-loss gradient norms and the limit they set."""

    def __init__(self, norms: list[float] | None = None) -> None:
        self.norms: list[float] = [float(n) for n in (norms or []) if math.isfinite(n) and n > 0][-WINDOW:]

    def limit(self, factor: float) -> float | None:
        """The largest norm a step may apply under `factor`, or None while the history is short."""
        check_factor(factor)
        if len(self.norms) < MIN_HISTORY:
            return None
        return factor * statistics.median(self.norms)

    def record(self, norm: float) -> None:
        if not math.isfinite(norm) or norm <= 0:
            return
        self.norms.append(float(norm))
        del self.norms[:-WINDOW]
