import type { Recipe } from './recipe.js';

/** Where a stack's own defaults differ: the embedded model's context, the cluster's port 8800. */
export interface ProxySettingDefaults {
  contextWindow: number | null;
  maxOutputTokens: number | null;
  /** The port for `proxy.port: 0` (0 itself: any free port). */
  port: number;
}

/**
 * The settings of a proxy a stack starts, from the recipe's `proxy` section (and the rollout
 * temperature), for `createProxyConfig`. Embedded and cluster stacks both start theirs from it.
 */
export function proxySettingsOf(recipe: Recipe, defaults: ProxySettingDefaults) {
  const proxy = recipe.proxy;
  return {
    host: proxy.host,
    port: proxy.port === 0 ? defaults.port : proxy.port,
    apiKey: proxy.api_key,
    tokenBuildMode: proxy.token_build_mode,
    tokenBuildModel: proxy.token_build_model,
    contextWindow: proxy.context_window ?? defaults.contextWindow,
    maxOutputTokens: proxy.max_output_tokens ?? defaults.maxOutputTokens,
    rolloutTemperature: recipe.rollout.temperature,
    recordTokenVersions: proxy.record_token_versions,
    maskNonlastVersionTokens: proxy.mask_nonlast_version_tokens,
    partialRollout: proxy.partial_rollout,
    maxPartialRolloutPreempts: proxy.max_partial_rollout_preempts ?? null,
  };
}
