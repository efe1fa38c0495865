import { DressageError } from '@dressage/protocol';
import { createProxyConfig, startProxyServer } from '@dressage/proxy';
import { createTrainerClient } from '@dressage/trainer-bridge';
import type { EmbeddedStack } from './embedded-stack.js';
import { proxySettingsOf } from './proxy-settings.js';
import type { LoadedRecipe } from './recipe.js';

/** What a cluster run connects to, from the recipe: the trainer, and the proxy it uses or starts. */
export interface ClusterStackPlan {
  trainerAddress: string;
  trainerClientOptions: { trainDeadlineMs: number };
  routerUrl: string;
  /** `proxy.url`: a running proxy; null when the run starts its own from `proxyConfig`. */
  proxyUrl: string | null;
  /** The proxy the run starts in front of the router; null with `proxy.url`. */
  proxyConfig: ReturnType<typeof createProxyConfig> | null;
}

/**
 * The {@link ClusterStackPlan} of a recipe (engine `sglang`, a gRPC trainer at an address).
 * @throws DressageError `invalid_argument` for another stack, or without `tokenizer_path` or `proxy.url`.
 */
export function clusterStackPlanOf(loaded: LoadedRecipe): ClusterStackPlan {
  const { recipe } = loaded;
  if (
    recipe.engine.kind !== 'sglang' ||
    recipe.trainer.kind !== 'grpc' ||
    recipe.trainer.address === undefined
  ) {
    throw new DressageError({
      code: 'invalid_argument',
      message: 'a cluster recipe needs engine.kind sglang and trainer.kind grpc with an address',
    });
  }
  const plan = {
    trainerAddress: recipe.trainer.address,
    trainerClientOptions: { trainDeadlineMs: recipe.trainer.deadline_seconds * 1000 },
    routerUrl: recipe.engine.router_url,
  };
  if (recipe.proxy.url !== undefined) return { ...plan, proxyUrl: recipe.proxy.url, proxyConfig: null };
  if (recipe.tokenizer_path === undefined) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${loaded.path}: tokenizer_path is required to start a proxy (or set proxy.url)`,
    });
  }
  return {
    ...plan,
    proxyUrl: null,
    proxyConfig: createProxyConfig({
      tokenizerPath: loaded.resolvePath(recipe.tokenizer_path),
      chatTemplate:
        recipe.proxy.chat_template === undefined ? null : loaded.resolvePath(recipe.proxy.chat_template),
      sglangRouterUrl: recipe.engine.router_url,
      ...proxySettingsOf(recipe, { contextWindow: null, maxOutputTokens: null, port: 8800 }),
      useRolloutRoutingReplay: recipe.training.routing_replay !== undefined,
    }),
  };
}

/**
 * Connects to a cluster deployment: the trainer (e.g. the Megatron worker) over gRPC, and the proxy
 * at `proxy.url` — or a proxy started here in front of the SGLang router when the recipe gives none.
 * No warm-start: a cluster starts from a pretrained model.
 */
export async function connectClusterStack(
  loaded: LoadedRecipe,
  log: (line: string) => void,
): Promise<EmbeddedStack> {
  const plan = clusterStackPlanOf(loaded);
  const address = plan.trainerAddress;
  const trainer = createTrainerClient(address, plan.trainerClientOptions);
  await trainer.waitForReady(30_000);
  const info = await trainer.getInfo();
  let proxyUrl = plan.proxyUrl;
  let closeProxy = async () => {};
  if (proxyUrl === null) {
    const proxy = await startProxyServer(plan.proxyConfig as NonNullable<ClusterStackPlan['proxyConfig']>);
    proxyUrl = proxy.url;
    closeProxy = () => proxy.close();
  }
  log(
    `cluster: trainer ${address} (${info.trainer_kind} ${info.model_name}, weights ${info.weight_version}), proxy ${proxyUrl}, router ${plan.routerUrl}`,
  );
  return {
    engineUrl: plan.routerUrl,
    proxyUrl,
    trainerAddress: address,
    trainer,
    weightVersion: info.weight_version,
    warmStartBatches: [],
    backend: info.backend,
    // The worker runs on another machine: output_dir is not its filesystem.
    checkpointsAt: 'trainer',
    async close() {
      await closeProxy();
      trainer.close();
    },
  };
}
