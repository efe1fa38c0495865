import type { Recipe } from './recipe.js';

/**
 * The policy-loss settings sent with every RL batch (the TrainerService's `loss`), from the
 * recipe's `loss` section. `grpo_std_normalization` acts in the conversion instead
 * (`conversionOptionsOf`).
 */
export function lossConfigOf(recipe: Recipe) {
  const loss = recipe.loss;
  return {
    loss_type: 'policy_loss',
    advantage_estimator: loss.advantage_estimator,
    eps_clip: loss.eps_clip,
    ...(loss.eps_clip_high === undefined ? {} : { eps_clip_high: loss.eps_clip_high }),
    ...(loss.eps_clip_c === undefined ? {} : { eps_clip_c: loss.eps_clip_c }),
    use_tis: loss.use_tis,
    use_rollout_logprobs: loss.use_rollout_logprobs,
    tis_clip: loss.tis_clip,
    tis_clip_low: loss.tis_clip_low,
    use_kl_loss: loss.use_kl_loss,
    kl_loss_coef: loss.kl_loss_coef,
    kl_loss_type: loss.kl_loss_type,
    entropy_coef: loss.entropy_coef,
    calculate_per_token_loss: loss.calculate_per_token_loss,
    learning_rate: loss.learning_rate,
    ...(loss.clip_grad_spike === undefined ? {} : { clip_grad_spike: loss.clip_grad_spike }),
  };
}
