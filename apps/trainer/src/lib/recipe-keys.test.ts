// Every key of the recipe schema reaches the code that acts on it. Each key of the table is set to
// a value other than its default and seen where a component receives it: the options the run
// builds from the recipe for its paths and steps, the scheduler, data source, generate functions,
// conversion, trainer loss, proxy, engine, trainer and worker, blackbox sandboxes, warm-start, the
// slime check, the report, and the modules and hooks it loads. A key added to the schema without
// an entry here fails the first test.
import { mkdtempSync } from 'node:fs';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadPromptRendering } from '@dressage/proxy';
import type { RolloutScheduler } from '@dressage/schedulers';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { minimalRecipe } from './__fixtures__/minimal-recipe.js';
import { blackboxPlanOf } from './blackbox-agents.js';
import { clusterStackPlanOf } from './cluster-stack.js';
import { conversionOptionsOf } from './conversion-options.js';
import { dataSourceOptionsOf } from './data-source-options.js';
import { slimeCheckCommandOf } from './dry-run.js';
import {
  embeddedProxyConfigOf,
  engineStartOf,
  modelConfigOf,
  vocabularyTextsOf,
  warmStartBatchesOf,
} from './embedded-stack.js';
import { expansionOptionsOf, whiteboxSettingsOf } from './expansion-options.js';
import { loadRecipeModules, loadRunHooks, loadRunRewards } from './hooks.js';
import { lossConfigOf } from './loss-config.js';
import { proxySettingsOf } from './proxy-settings.js';
import { type LoadedRecipe, mergeRecipeDocuments, type Recipe, recipeSchema } from './recipe.js';
import { checkpointsAfterStep, publishesAfterStep, reportsAfterStep, runPlanOf } from './run-plan.js';
import { writeReport } from './run-report.js';
import { createRunScheduler, schedulerOptionsOf } from './scheduler-options.js';
import { trainerStartOf } from './stack-trainer.js';
import { warmStartTrainOptionsOf } from './warm-start.js';
import { warmStartCachePath } from './warm-start-phase.js';
import { pauseSettingsOf } from './weight-publish.js';

const here = dirname(fileURLToPath(import.meta.url));
// The folder the table's recipe is read from: its relative paths and modules resolve here.
const recipeDirectory = join(here, '__fixtures__', 'recipe-keys');
const modules = './modules.ts';
const cacheDirectory = mkdtempSync(join(tmpdir(), 'dressage-recipe-keys-'));

type Probe = (recipe: Recipe, loaded: LoadedRecipe) => unknown;
/**
 * A key seen where it acts: set to `value` (with the keys in `with`) over the recipe `from` gives,
 * `probe` reads what the component receives from the run's own function.
 */
interface Arrives {
  value: unknown;
  probe: Probe;
  /** What the component receives; default `value`. */
  expected?: unknown;
  /** Other keys the value needs (e.g. the section's other required keys). */
  with?: Record<string, unknown>;
  /** Keys of the recipe it is compared against, kept when the value is set (e.g. another stack). */
  from?: Record<string, unknown>;
}
/** A section's `kind`: the recipe with `to` against the recipe with `from` (a union cannot merge kinds). */
interface Switches {
  from: Record<string, unknown>;
  to: Record<string, unknown>;
  probe: Probe;
  expected: unknown;
}

const scheduler = (recipe: Recipe) => schedulerOptionsOf(recipe, 1);
const sampling = (recipe: Recipe) => scheduler(recipe).samplingParams as Record<string, unknown>;
const proxy = (recipe: Recipe) =>
  proxySettingsOf(recipe, { contextWindow: null, maxOutputTokens: null, port: 0 });
const model = (recipe: Recipe) =>
  recipe.engine.kind === 'embedded' ? (modelConfigOf(recipe.engine.model) as Record<string, unknown>) : {};
const loss = (recipe: Recipe) => lossConfigOf(recipe) as Record<string, unknown>;
const plan = (_recipe: Recipe, loaded: LoadedRecipe) => runPlanOf(loaded);
const steps = [0, 1, 2, 3, 4, 5];
const trainerStart = (recipe: Recipe, loaded: LoadedRecipe) =>
  trainerStartOf(recipe, {
    engineUrl: 'http://127.0.0.1:1',
    outputDirectory: '/run',
    resolvePath: loaded.resolvePath,
  });
// The worker's flag value after `flag`; null without a worker.
const workerFlag = (flag: string) => (recipe: Recipe, loaded: LoadedRecipe) => {
  const start = trainerStart(recipe, loaded);
  return start.kind === 'worker' ? start.args[start.args.indexOf(flag) + 1] : null;
};
const blackbox = async (_recipe: Recipe, loaded: LoadedRecipe) => (await blackboxPlanOf(loaded)).generate;
const hooks = (recipe: Recipe) => loadRunHooks(recipe, recipeDirectory);
const cluster = (_recipe: Recipe, loaded: LoadedRecipe) => clusterStackPlanOf(loaded);
const slime = (_recipe: Recipe, loaded: LoadedRecipe) => slimeCheckCommandOf(loaded);
const warmStartRate = (index: number) => (recipe: Recipe) =>
  Number(warmStartTrainOptionsOf(recipe, index).loss.learning_rate.toFixed(9));
// The mode the scheduler factory is called with.
const schedulerMode = (recipe: Recipe) => {
  let mode: string | null = null;
  createRunScheduler(
    recipe,
    { dataSource: { next: () => null } as never, generate: () => null },
    1,
    (given) => {
      mode = given;
      return {} as RolloutScheduler;
    },
  );
  return mode;
};
const sequences = Array.from({ length: 5 }, () => ({
  promptIds: Int32Array.of(1, 2),
  completionIds: Int32Array.of(3),
  text: 'x',
}));

// A cluster recipe: SGLang behind a router, a gRPC trainer at an address.
const clusterStack = {
  tokenizer_path: 'tokenizer',
  engine: { kind: 'sglang', router_url: 'http://127.0.0.1:30000' },
  trainer: { kind: 'grpc', address: '127.0.0.1:50051' },
};
const grpcTrainer = { trainer: { kind: 'grpc', address: '127.0.0.1:50051' } };
const torchWorker = { trainer: { kind: 'grpc', worker: { worker_dir: 'worker' } } };
const slimeCheck = {
  trainer: { kind: 'grpc', address: '127.0.0.1:50051', slime_check: { worker_dir: 'megatron', args: '--x' } },
};
const cosine = { warm_start: { steps: 4, learning_rate_schedule: 'cosine' } };

const table: Record<string, Arrives | Switches> = {
  name: {
    value: 'keys',
    probe: async (recipe) => {
      const html = await readFile(await writeReport(await mkdtemp(join(tmpdir(), 'keys-')), recipe), 'utf8');
      return /<h1>(.*?)<\/h1>/.exec(html)?.[1];
    },
  },
  seed: { value: 9, probe: (recipe) => dataSourceOptionsOf(recipe).seed },
  output_dir: { value: '/keys/run', probe: (...args) => plan(...args).outputDirectory },
  tokenizer_path: {
    value: 'tokenizer',
    expected: join(recipeDirectory, 'tokenizer'),
    probe: (recipe, loaded) =>
      embeddedProxyConfigOf(recipe, { ...loaded, outputDirectory: '/run' }).tokenizerPath,
  },
  'data.path': {
    value: 'other.jsonl',
    expected: join(recipeDirectory, 'other.jsonl'),
    probe: (...args) => plan(...args).dataPath,
  },
  'data.input_key': { value: 'question', probe: (recipe) => dataSourceOptionsOf(recipe).inputKey },
  'data.label_key': { value: 'answer', probe: (recipe) => dataSourceOptionsOf(recipe).labelKey },
  'data.metadata_key': { value: 'meta', probe: (recipe) => dataSourceOptionsOf(recipe).metadataKey },
  'data.n_samples_per_prompt': { value: 3, probe: (recipe) => scheduler(recipe).nSamplesPerPrompt },
  'data.rollout_batch_size': { value: 3, probe: (recipe) => scheduler(recipe).rolloutBatchSize },
  'data.shuffle': { value: false, probe: (recipe) => dataSourceOptionsOf(recipe).shuffle },
  'rollout.mode': { value: 'fully-async', probe: schedulerMode },
  'rollout.temperature': { value: 0.5, probe: (recipe) => sampling(recipe).temperature },
  'rollout.top_p': { value: 0.9, probe: (recipe) => sampling(recipe).top_p },
  'rollout.max_new_tokens': { value: 7, probe: (recipe) => sampling(recipe).max_new_tokens },
  'rollout.max_turns': { value: 3, probe: (recipe) => whiteboxSettingsOf(recipe).maxTurns },
  'rollout.max_retries': { value: 5, probe: (recipe) => scheduler(recipe).maxRetries },
  'rollout.keep_versions': { value: 2, probe: (recipe) => scheduler(recipe).stalenessKeepVersions },
  'rollout.max_active_samples': { value: 3, probe: (recipe) => scheduler(recipe).asyncMaxActiveSamples },
  'rollout.max_outstanding_groups': {
    value: 3,
    probe: (recipe) => scheduler(recipe).asyncMaxOutstandingGroups,
  },
  'rollout.recall_stale_groups': {
    value: true,
    probe: (recipe) => scheduler(recipe).stalenessRecallInFlight,
  },
  'rollout.update_weights_interval': {
    value: 2,
    expected: [1, 3, 5],
    probe: (recipe) => steps.filter((step) => publishesAfterStep(recipe, step)),
  },
  'agent.module': {
    value: `${modules}#KeyAgent`,
    expected: 'KeyAgent',
    probe: async (recipe) => (await loadRecipeModules(recipe, recipeDirectory)).agent?.name ?? null,
  },
  'agent.sandbox_slots': {
    value: 5,
    from: { agent: { module: `${modules}#KeyAgent` } },
    probe: (...args) => plan(...args).sandboxSlots,
  },
  'blackbox.agent': {
    value: 'codex',
    from: { blackbox: {} },
    probe: async (...args) => (await blackbox(...args)).blackboxType,
  },
  'blackbox.slots': {
    value: 5,
    from: { blackbox: {} },
    probe: async (_recipe, loaded) => (await blackboxPlanOf(loaded)).slots,
  },
  'blackbox.backend_options': {
    value: { proxy: { default_temperature: 0.3 } },
    expected: { proxy: { default_temperature: 0.3, max_steps: 8 } },
    from: { blackbox: {} },
    probe: async (...args) => (await blackbox(...args)).backendOptions,
  },
  'blackbox.system_prompt': {
    value: 'system-prompt.md',
    expected: 'You answer in one word.\n',
    from: { blackbox: {} },
    probe: async (...args) => (await blackbox(...args)).systemPrompt,
  },
  'blackbox.max_steps': {
    value: 3,
    from: { blackbox: {} },
    probe: async (...args) =>
      ((await blackbox(...args)).backendOptions.proxy as { max_steps: number }).max_steps,
  },
  'blackbox.turn_timeout_seconds': {
    value: 30,
    from: { blackbox: {} },
    probe: async (...args) => (await blackbox(...args)).serverConfig.backend_timeout,
  },
  'proxy.url': {
    value: 'http://127.0.0.1:9999/',
    from: clusterStack,
    probe: (...args) => cluster(...args).proxyUrl,
  },
  'proxy.api_key': { value: 'secret', probe: (recipe) => proxy(recipe).apiKey },
  'proxy.token_build_mode': { value: 'snapshot', probe: (recipe) => proxy(recipe).tokenBuildMode },
  'proxy.token_build_model': { value: 'qwen3', probe: (recipe) => proxy(recipe).tokenBuildModel },
  'proxy.chat_template': {
    // The template renders the prompts the proxy tokenizes.
    value: 'template.jinja',
    expected: true,
    from: { proxy: { token_build_mode: 'snapshot', token_build_model: 'qwen3_6' } },
    probe: async (recipe, loaded) => {
      const { renderer } = await loadPromptRendering(
        embeddedProxyConfigOf(recipe, { ...loaded, outputDirectory: '/run' }),
      );
      return renderer.render([{ role: 'user', content: 'hi' }]).startsWith('[recipe template]');
    },
  },
  'proxy.context_window': { value: 99, probe: (recipe) => proxy(recipe).contextWindow },
  'proxy.max_output_tokens': { value: 9, probe: (recipe) => proxy(recipe).maxOutputTokens },
  'proxy.partial_rollout': { value: true, probe: (recipe) => proxy(recipe).partialRollout },
  'proxy.max_partial_rollout_preempts': {
    value: 2,
    probe: (recipe) => proxy(recipe).maxPartialRolloutPreempts,
  },
  'proxy.record_token_versions': { value: false, probe: (recipe) => proxy(recipe).recordTokenVersions },
  'proxy.pause_around_weight_update': {
    value: false,
    probe: (recipe) => pauseSettingsOf(recipe).aroundWeightUpdate,
  },
  'proxy.pause_required': { value: false, probe: (recipe) => pauseSettingsOf(recipe).required },
  'proxy.pause_timeout_seconds': { value: 30, probe: (recipe) => pauseSettingsOf(recipe).timeoutSeconds },
  'proxy.mask_nonlast_version_tokens': {
    value: true,
    probe: (recipe) => expansionOptionsOf(recipe).maskNonlastVersionTokens,
  },
  'proxy.host': { value: '127.0.0.2', probe: (recipe) => proxy(recipe).host },
  'proxy.port': { value: 8123, probe: (recipe) => proxy(recipe).port },
  'engine(embedded).kind': {
    from: clusterStack,
    to: {},
    expected: 'embedded',
    probe: (...args) => plan(...args).stack,
  },
  'engine(embedded).model.layers': { value: 3, probe: (recipe) => model(recipe).layerCount },
  'engine(embedded).model.d_model': { value: 32, probe: (recipe) => model(recipe).modelDimension },
  'engine(embedded).model.heads': { value: 2, probe: (recipe) => model(recipe).headCount },
  'engine(embedded).model.ffn': { value: 48, probe: (recipe) => model(recipe).feedForwardDimension },
  'engine(embedded).model.context': { value: 128, probe: (recipe) => model(recipe).contextLength },
  'engine(embedded).model.seed': { value: 5, probe: (recipe) => model(recipe).seed },
  'engine(embedded).model.positions': { value: 'alibi', probe: (recipe) => model(recipe).positionEncoding },
  'engine(embedded).model.initialization': {
    value: 'small',
    probe: (recipe) => model(recipe).initialization,
  },
  'engine(embedded).vocabulary_texts': {
    value: ['zebra crossing'],
    probe: (recipe) => vocabularyTextsOf(recipe, [], []),
  },
  'engine(embedded).port': { value: 8765, probe: (recipe) => engineStartOf(recipe).port },
  'engine(embedded).process': { value: 'own', probe: (recipe) => engineStartOf(recipe).process },
  'engine(sglang).kind': {
    from: {},
    to: clusterStack,
    expected: 'cluster',
    probe: (...args) => plan(...args).stack,
  },
  'engine(sglang).router_url': {
    value: 'http://127.0.0.1:31000',
    from: clusterStack,
    probe: (...args) => cluster(...args).proxyConfig?.sglangRouterUrl,
  },
  'trainer(embedded).kind': {
    from: grpcTrainer,
    to: {},
    expected: 'embedded',
    probe: (...args) => trainerStart(...args).kind,
  },
  'trainer(grpc).kind': {
    from: {},
    to: grpcTrainer,
    expected: 'address',
    probe: (...args) => trainerStart(...args).kind,
  },
  'trainer(grpc).address': {
    value: '127.0.0.1:50052',
    from: grpcTrainer,
    probe: (...args) => {
      const start = trainerStart(...args);
      return start.kind === 'address' ? start.address : null;
    },
  },
  'trainer(grpc).deadline_seconds': {
    value: 60,
    expected: 60_000,
    from: grpcTrainer,
    probe: (...args) => {
      const start = trainerStart(...args);
      return start.kind === 'embedded' ? null : start.clientOptions.trainDeadlineMs;
    },
  },
  'trainer(grpc).worker.python': {
    value: '/opt/python',
    from: torchWorker,
    probe: (...args) => {
      const start = trainerStart(...args);
      return start.kind === 'worker' ? start.python : null;
    },
  },
  'trainer(grpc).worker.worker_dir': {
    value: 'other-worker',
    expected: join(recipeDirectory, 'other-worker'),
    from: torchWorker,
    probe: (...args) => {
      const start = trainerStart(...args);
      return start.kind === 'worker' ? start.workerDirectory : null;
    },
  },
  // `torch` is the only actor: set, it reaches the worker's --actor (against a trainer without a worker).
  'trainer(grpc).worker.actor': {
    value: 'torch',
    from: grpcTrainer,
    with: { trainer: { worker: { worker_dir: 'worker' } } },
    probe: workerFlag('--actor'),
  },
  'trainer(grpc).worker.processes': {
    value: 3,
    expected: '3',
    from: torchWorker,
    probe: workerFlag('--processes'),
  },
  'trainer(grpc).worker.threads': {
    value: 4,
    expected: '4',
    from: torchWorker,
    probe: workerFlag('--threads'),
  },
  'trainer(grpc).worker.args': {
    value: ' --seed 7  --bf16 ',
    expected: ['--seed', '7', '--bf16'],
    from: torchWorker,
    probe: (...args) => {
      const start = trainerStart(...args);
      return start.kind === 'worker' ? start.args.slice(-3) : null;
    },
  },
  'trainer(grpc).slime_check.python': {
    value: '/opt/python',
    from: slimeCheck,
    probe: (...args) => slime(...args)?.command[0],
  },
  'trainer(grpc).slime_check.worker_dir': {
    value: 'other-megatron',
    expected: join(recipeDirectory, 'other-megatron'),
    from: slimeCheck,
    probe: (...args) => slime(...args)?.cwd,
  },
  'trainer(grpc).slime_check.args': {
    value: '--tp 2 --pp 1',
    expected: ['--tp', '2', '--pp', '1'],
    from: slimeCheck,
    probe: (...args) => {
      const command = slime(...args)?.command ?? [];
      return command.slice(command.indexOf('--') + 1);
    },
  },
  'loss.advantage_estimator': { value: 'gspo', probe: (recipe) => loss(recipe).advantage_estimator },
  'loss.eps_clip': { value: 0.3, probe: (recipe) => loss(recipe).eps_clip },
  'loss.grpo_std_normalization': {
    value: false,
    probe: (recipe) => conversionOptionsOf(recipe, 1, null).standardDeviationNormalization,
  },
  'loss.eps_clip_high': { value: 0.28, probe: (recipe) => loss(recipe).eps_clip_high },
  'loss.eps_clip_c': { value: 3, probe: (recipe) => loss(recipe).eps_clip_c },
  'loss.use_tis': { value: true, probe: (recipe) => loss(recipe).use_tis },
  'loss.use_rollout_logprobs': { value: true, probe: (recipe) => loss(recipe).use_rollout_logprobs },
  'loss.tis_clip': { value: 3, probe: (recipe) => loss(recipe).tis_clip },
  'loss.tis_clip_low': { value: 0.1, probe: (recipe) => loss(recipe).tis_clip_low },
  'loss.use_kl_loss': { value: true, probe: (recipe) => loss(recipe).use_kl_loss },
  'loss.kl_loss_coef': { value: 0.01, probe: (recipe) => loss(recipe).kl_loss_coef },
  'loss.kl_loss_type': { value: 'k3', probe: (recipe) => loss(recipe).kl_loss_type },
  'loss.entropy_coef': { value: 0.01, probe: (recipe) => loss(recipe).entropy_coef },
  'loss.calculate_per_token_loss': { value: true, probe: (recipe) => loss(recipe).calculate_per_token_loss },
  'loss.learning_rate': { value: 0.002, probe: (recipe) => loss(recipe).learning_rate },
  'loss.clip_grad_spike': { value: 4, probe: (recipe) => loss(recipe).clip_grad_spike },
  'warm_start.steps': { value: 3, probe: (...args) => plan(...args).warmStartSteps },
  'warm_start.learning_rate': { value: 0.01, probe: warmStartRate(0) },
  'warm_start.learning_rate_schedule': {
    value: 'cosine',
    expected: 0.0015,
    with: { warm_start: { steps: 4 } },
    probe: warmStartRate(2),
  },
  'warm_start.min_learning_rate': { value: 0.001, expected: 0.002, from: cosine, probe: warmStartRate(2) },
  'warm_start.batch_size': {
    value: 2,
    expected: 3,
    probe: (recipe) => warmStartBatchesOf(recipe, sequences).length,
  },
  'warm_start.examples': {
    value: `${modules}#examples`,
    expected: 'examples',
    probe: async (recipe) =>
      (await loadRecipeModules(recipe, recipeDirectory)).warmStartExamples?.name ?? null,
  },
  'warm_start.cache_dir': {
    // Outside the fixture folder: the cache folder is made when its path is asked for.
    value: cacheDirectory,
    probe: async (_recipe, loaded) => {
      const path = await warmStartCachePath(loaded, [], join(recipeDirectory, 'prompts.jsonl'));
      return path === null ? null : dirname(path);
    },
  },
  'training.steps': { value: 7, probe: (...args) => plan(...args).totalSteps },
  'training.global_batch_size': { value: 6, probe: (recipe) => scheduler(recipe).globalBatchSize },
  'training.checkpoint_interval': {
    value: 2,
    expected: [1, 3, 5],
    probe: (recipe) => steps.filter((step) => checkpointsAfterStep(recipe, step, 6)),
  },
  'training.report_interval': {
    value: 2,
    expected: [1, 3, 5],
    probe: (recipe) => steps.filter((step) => reportsAfterStep(recipe, step)),
  },
  'training.max_sequence_length': {
    value: 100,
    probe: (recipe) => conversionOptionsOf(recipe, 1, null).maxSequenceLength,
  },
  'training.max_tokens_per_gpu': { value: 64, probe: (recipe) => expansionOptionsOf(recipe).maxTokensPerGpu },
  'training.context_parallel_size': {
    value: 2,
    probe: (recipe) => expansionOptionsOf(recipe).contextParallelSize,
  },
  'training.routing_replay.num_layers': {
    value: 4,
    with: { training: { routing_replay: { moe_router_topk: 2 } } },
    from: clusterStack,
    probe: (recipe) => conversionOptionsOf(recipe, 1, null).numLayers,
  },
  'training.routing_replay.moe_router_topk': {
    value: 3,
    with: { training: { routing_replay: { num_layers: 2 } } },
    from: clusterStack,
    probe: (recipe) => expansionOptionsOf(recipe).routingReplay?.moeRouterTopk,
  },
  'hooks.generate': {
    value: `${modules}#keyGenerate`,
    expected: 'keyGenerate',
    probe: async (recipe) => (await hooks(recipe)).generate?.name ?? null,
  },
  'hooks.rollout_scheduler': {
    value: `${modules}#keyScheduler`,
    expected: 'keyScheduler',
    probe: async (recipe) => (await hooks(recipe)).rolloutScheduler?.name ?? null,
  },
  'hooks.data_source': {
    value: `${modules}#keyDataSource`,
    expected: 'keyDataSource',
    probe: async (recipe) => (await hooks(recipe)).dataSource?.name ?? null,
  },
  'hooks.convert': {
    value: `${modules}#keyConvert`,
    expected: 'keyConvert',
    probe: async (recipe) => (await hooks(recipe)).convert?.name ?? null,
  },
  'hooks.reward_post_process': {
    value: `${modules}#keyPostProcess`,
    expected: 'keyPostProcess',
    probe: async (recipe) => (await hooks(recipe)).rewardPostProcess?.name ?? null,
  },
  'hooks.rollout_log_function': {
    value: `${modules}#keyRolloutLog`,
    expected: 'keyRolloutLog',
    probe: async (recipe) => (await hooks(recipe)).rolloutLog?.name ?? null,
  },
  'hooks.reward_modules': {
    value: [modules],
    expected: true,
    probe: async (recipe) => (await loadRunRewards(recipe, recipeDirectory)).has('key_reward'),
  },
};

type Schema = { _zod: { def: Record<string, unknown> } };

// Past the wrappers (default, optional, nullable, transforms) to the schema that holds the value.
function unwrap(schema: Schema): Schema {
  let current = schema;
  for (;;) {
    const def = current._zod.def as { type: string; innerType?: Schema; in?: Schema };
    if (def.innerType !== undefined) current = def.innerType;
    else if (def.type === 'pipe' && def.in !== undefined) current = def.in;
    else return current;
  }
}

// Every leaf key of the schema; a discriminated union's options as `section(kind).key`.
function recipeKeys(schema: Schema, prefix = ''): string[] {
  const def = unwrap(schema)._zod.def as { type: string; shape?: Record<string, Schema>; options?: Schema[] };
  if (def.type === 'object' && def.shape !== undefined) {
    return Object.entries(def.shape).flatMap(([key, value]) =>
      recipeKeys(value, prefix === '' ? key : `${prefix}.${key}`),
    );
  }
  const options = def.options?.map(
    (option) => unwrap(option)._zod.def as { type: string; shape?: Record<string, Schema> },
  );
  if (def.type === 'union' && options?.every((option) => option.type === 'object')) {
    return options.flatMap((option) => {
      const kindDef = option.shape?.kind?._zod.def as { values?: unknown[] } | undefined;
      const kind = kindDef?.values?.[0];
      return Object.entries(option.shape ?? {}).flatMap(([key, value]) =>
        key === 'kind'
          ? [`${prefix}(${String(kind)}).kind`]
          : recipeKeys(value, `${prefix}(${String(kind)}).${key}`),
      );
    });
  }
  return [prefix];
}

// `{ a: { b: value } }` for the path `a.b` (a union's `(kind)` is written as the section's kind).
function documentSetting(path: string, value: unknown): Record<string, unknown> {
  const parts = path.split('.');
  const root: Record<string, unknown> = {};
  let node = root;
  parts.forEach((part, index) => {
    const union = /^(\w+)\((\w+)\)$/.exec(part);
    const key = union ? (union[1] as string) : part;
    const child: Record<string, unknown> = union ? { kind: union[2] } : {};
    if (index === parts.length - 1) node[key] = value;
    else {
      node[key] = child;
      node = child;
    }
  });
  return root;
}

const base = parseYaml(minimalRecipe) as Record<string, unknown>;

// The recipe as `loadRecipe` gives it, read from the fixture folder (the environment not consulted).
function load(document: unknown): { recipe: Recipe; loaded: LoadedRecipe } {
  const recipe = recipeSchema.parse(mergeRecipeDocuments(base, document));
  const loaded: LoadedRecipe = {
    recipe,
    path: join(recipeDirectory, 'recipe.yaml'),
    resolvePath: (path) => (isAbsolute(path) ? path : resolve(recipeDirectory, path)),
  };
  return { recipe, loaded };
}

async function probeOf(probe: Probe, document: unknown): Promise<unknown> {
  const { recipe, loaded } = load(document);
  return await probe(recipe, loaded);
}

describe('every recipe key reaches the code that acts on it', () => {
  it('has an entry for every key of the schema, and none for a key it lacks', () => {
    const keys = recipeKeys(recipeSchema as unknown as Schema).sort();
    expect(Object.keys(table).sort()).toEqual(keys);
  });

  const arriving = Object.entries(table).filter((entry): entry is [string, Arrives] => 'value' in entry[1]);
  it.each(arriving)('%s set to another value arrives where it acts', async (path, entry) => {
    const from = entry.from ?? {};
    const setting = mergeRecipeDocuments(documentSetting(path, entry.value), entry.with ?? {});
    const expected = entry.expected ?? entry.value;
    expect(await probeOf(entry.probe, mergeRecipeDocuments(from, setting))).toEqual(expected);
    // The value differs from what the component gets without it: the key is what changed it.
    expect(await probeOf(entry.probe, from)).not.toEqual(expected);
  });

  const switching = Object.entries(table).filter((entry): entry is [string, Switches] => 'to' in entry[1]);
  it.each(switching)('%s switches what the run starts', async (_path, entry) => {
    expect(await probeOf(entry.probe, entry.to)).toEqual(entry.expected);
    expect(await probeOf(entry.probe, entry.from)).not.toEqual(entry.expected);
  });
});
