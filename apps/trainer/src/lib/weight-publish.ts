import { DressageError, type RolloutPauseResponse } from '@dressage/protocol';
import type { ProxyClient } from '@dressage/proxy';
import type { TrainerClient } from '@dressage/trainer-bridge';
import type { Recipe } from './recipe.js';

/** How the proxy's rollouts are paused around a weight update (the recipe's `proxy.pause_*` keys). */
export interface PauseSettings {
  /** Pause the proxy before the weights move and resume it after. */
  aroundWeightUpdate: boolean;
  /** A pause that fails or does not quiesce stops the update instead of letting it race generations. */
  required: boolean;
  /** Seconds the proxy waits for its aborted generations to return their partial output. */
  timeoutSeconds: number;
}

/** The pause settings a recipe gives (its own keys, else the environment, else the defaults). */
export function pauseSettingsOf(recipe: Pick<Recipe, 'proxy'>): PauseSettings {
  return {
    aroundWeightUpdate: recipe.proxy.pause_around_weight_update,
    required: recipe.proxy.pause_required,
    timeoutSeconds: recipe.proxy.pause_timeout_seconds,
  };
}

/** What one weight update did. */
export interface PublishedWeights {
  weightVersion: string;
  /** Whether the proxy was paused around the update. */
  paused: boolean;
  /** Whether every generation the pause aborted had returned before the weights moved. */
  quiesced: boolean;
}

function stillRunning(answer: RolloutPauseResponse): string {
  const failed = answer.abort_failed_request_ids;
  return (
    `${answer.active_sglang_generations} generation(s) still running after ${answer.status}` +
    (failed.length > 0 ? `, abort failed for ${failed.join(', ')}` : '')
  );
}

/**
 * Pauses the proxy, pushes the trained weights to the engines, resumes (the reference's
 * weight-update flow). A required pause that fails or does not quiesce within the timeout leaves
 * the weights where they are and throws, naming `reason` (the step) and what was still running:
 * the generations in flight would otherwise mix tokens of two weight versions that no pause
 * recorded.
 *
 * @throws DressageError `failed_precondition` when a required pause did not quiesce; the proxy's
 *   own error when a required pause could not be asked for.
 */
export async function publishWeights(
  trainer: Pick<TrainerClient, 'updateWeights'>,
  proxy: Pick<ProxyClient, 'pauseRollout' | 'resumeRollout'>,
  reason: string,
  settings: PauseSettings,
  log: (line: string) => void = () => {},
): Promise<PublishedWeights> {
  if (!settings.aroundWeightUpdate) {
    const response = await trainer.updateWeights({});
    return { weightVersion: response.weight_version, paused: false, quiesced: false };
  }
  let answer: RolloutPauseResponse;
  try {
    answer = await proxy.pauseRollout(reason, settings.timeoutSeconds);
  } catch (error) {
    if (settings.required) throw error;
    log(`${reason}: the proxy pause failed (${(error as Error).message}); updating weights anyway`);
    const response = await trainer.updateWeights({});
    return { weightVersion: response.weight_version, paused: false, quiesced: false };
  }
  try {
    if (!answer.quiesced) {
      const why = `${reason}: the proxy pause did not quiesce within ${settings.timeoutSeconds} s (${stillRunning(answer)})`;
      if (settings.required) {
        throw new DressageError({
          code: 'failed_precondition',
          message:
            `${why}; the weights were not updated. Raise proxy.pause_timeout_seconds ` +
            '(DRESSAGE_PROXY_PAUSE_TIMEOUT_SEC) or set proxy.pause_required: false to update anyway',
          details: {
            reason,
            timeout_seconds: settings.timeoutSeconds,
            active_sglang_generations: answer.active_sglang_generations,
            abort_failed_request_ids: answer.abort_failed_request_ids,
          },
        });
      }
      log(`${why}; updating weights anyway (proxy.pause_required is false)`);
    }
    const response = await trainer.updateWeights({});
    return { weightVersion: response.weight_version, paused: true, quiesced: answer.quiesced };
  } finally {
    await proxy.resumeRollout(undefined, reason);
  }
}
