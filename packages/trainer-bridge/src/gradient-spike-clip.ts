import { DressageError } from '@dressage/protocol';

/** Policy-loss steps whose gradient norms set the spike limit. */
export const GRADIENT_SPIKE_WINDOW = 20;
/** Steps of history before the spike clip acts (the median of fewer is noise). */
export const GRADIENT_SPIKE_MIN_HISTORY = 5;

/**
 * The gradient-spike clip (`LossConfig.clip_grad_spike`, the recipe's `loss.clip_grad_spike`): a
 * policy-loss step whose global gradient norm exceeds `factor` × the median norm of the last
 * {@link GRADIENT_SPIKE_WINDOW} policy-loss steps is scaled down to that limit before the
 * optimizer step.
 *
 * Why: once a policy nearly solves its task, almost every sampled token has probability near 1 and
 * the gradient is tiny; one failed sample with an unlikely token then gives a gradient 10–40× the
 * usual. Adam divides by the root of its second moment, which remembers the small gradients (β2
 * 0.999), so that one gradient becomes a step of about `lr·(1−β1)/√(1−β2)` ≈ 3·lr on every weight
 * it touches, all in one direction, and the momentum repeats it for the next steps: about 30·lr in
 * all. Measured on the weather recipe, such a step moved one token's logprob by 8.5 nats and the
 * policy stopped writing `<tool_call>` a few steps later. Clipping the spike to a few times the
 * usual norm keeps its direction and bounds its size.
 *
 * Zero norms (steps where every group scored the same) and non-finite ones are not recorded. The
 * history is part of the trainer's state: {@link norms} goes into checkpoints and back through the
 * constructor.
 */
export class GradientSpikeClip {
  readonly #norms: number[];

  constructor(norms: readonly number[] = []) {
    this.#norms = norms.filter((norm) => Number.isFinite(norm) && norm > 0).slice(-GRADIENT_SPIKE_WINDOW);
  }

  /** The recorded norms, oldest first (at most {@link GRADIENT_SPIKE_WINDOW}). */
  get norms(): readonly number[] {
    return this.#norms;
  }

  /**
   * The largest gradient norm a step may apply under `factor`, or null while the history is
   * shorter than {@link GRADIENT_SPIKE_MIN_HISTORY}.
   * @throws DressageError `invalid_argument` (field `loss.clip_grad_spike`) unless `factor > 1`.
   */
  limit(factor: number): number | null {
    checkGradientSpikeFactor(factor);
    if (this.#norms.length < GRADIENT_SPIKE_MIN_HISTORY) return null;
    return factor * median(this.#norms);
  }

  /** Records a step's gradient norm before clipping (zero and non-finite norms are skipped). */
  record(norm: number): void {
    if (!Number.isFinite(norm) || norm <= 0) return;
    this.#norms.push(norm);
    if (this.#norms.length > GRADIENT_SPIKE_WINDOW) this.#norms.shift();
  }
}

/**
 * Checks a `clip_grad_spike` factor.
 * @throws DressageError `invalid_argument` (field `loss.clip_grad_spike`) unless it is a finite number > 1.
 */
export function checkGradientSpikeFactor(factor: number): void {
  if (!(Number.isFinite(factor) && factor > 1)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `loss.clip_grad_spike must be a number greater than 1 (a multiple of the median gradient norm), got ${factor}`,
      details: { field: 'loss.clip_grad_spike', clip_grad_spike: factor },
    });
  }
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
}
