import { DressageError } from '@dressage/protocol';
import { createProxyConfig, startProxyServer } from '@dressage/proxy';
import { createTrainerClient } from '@dressage/trainer-bridge';
import type { EmbeddedStack } from './embedded-stack.js';
import { proxySettingsOf } from './proxy-settings.js';
import type { LoadedRecipe } from './recipe.js';

/**
 * Connects to a cluster deployment: the trainer (e.g. the Megatron worker) over gRPC, and the proxy
 * at `proxy.url` — or a proxy started here in front of the SGLang router when the recipe gives none.
 * No warm-start: a cluster starts from a pretrained model.
 */
export async function connectClusterStack(
  loaded: LoadedRecipe,
  log: (line: string) => void,
): Promise<EmbeddedStack> {
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
  const address = recipe.trainer.address;
  const trainer = createTrainerClient(address, {
    trainDeadlineMs: recipe.trainer.deadline_seconds * 1000,
  });
  await trainer.waitForReady(30_000);
  const info = await trainer.getInfo();
  let proxyUrl = recipe.proxy.url;
  let closeProxy = async () => {};
  if (proxyUrl === undefined) {
    if (recipe.tokenizer_path === undefined) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `${loaded.path}: tokenizer_path is required to start a proxy (or set proxy.url)`,
      });
    }
    const proxy = await startProxyServer(
      createProxyConfig({
        tokenizerPath: loaded.resolvePath(recipe.tokenizer_path),
        chatTemplate:
          recipe.proxy.chat_template === undefined ? null : loaded.resolvePath(recipe.proxy.chat_template),
        sglangRouterUrl: recipe.engine.router_url,
        ...proxySettingsOf(recipe, { contextWindow: null, maxOutputTokens: null, port: 8800 }),
        useRolloutRoutingReplay: recipe.training.routing_replay !== undefined,
      }),
    );
    proxyUrl = proxy.url;
    closeProxy = () => proxy.close();
  }
  log(
    `cluster: trainer ${address} (${info.trainer_kind} ${info.model_name}, weights ${info.weight_version}), proxy ${proxyUrl}, router ${recipe.engine.router_url}`,
  );
  return {
    engineUrl: recipe.engine.router_url,
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
