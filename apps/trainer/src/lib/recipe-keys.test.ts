// Every key of the recipe schema reaches the code that acts on it. Each key of the table is set to
// a value other than its default and seen where a component receives it: the settings the run
// hands to the scheduler, data source, whitebox and blackbox generate functions, conversion,
// trainer loss, proxy, weight publishing and the embedded model. Keys that act inside a running
// stack (paths, processes, hooks, intervals) are named with the test that runs them set. A key
// added to the schema without an entry here fails the first test.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { minimalRecipe } from './__fixtures__/minimal-recipe.js';
import { conversionOptionsOf } from './conversion-options.js';
import { dataSourceOptionsOf } from './data-source-options.js';
import { modelConfigOf } from './embedded-stack.js';
import { expansionOptionsOf, whiteboxSettingsOf } from './expansion-options.js';
import { lossConfigOf } from './loss-config.js';
import { proxySettingsOf } from './proxy-settings.js';
import { mergeRecipeDocuments, type Recipe, recipeSchema } from './recipe.js';
import { schedulerOptionsOf } from './scheduler-options.js';
import { pauseSettingsOf } from './weight-publish.js';

const here = dirname(fileURLToPath(import.meta.url));

type Probe = (recipe: Recipe) => unknown;
/** A key seen where it acts: set to `value`, `probe` reads what the component receives. */
interface Arrives {
  value: unknown;
  probe: Probe;
  /** What the component receives; default `value`. */
  expected?: unknown;
  /** Other keys the value needs (e.g. the section's kind). */
  with?: Record<string, unknown>;
}
/**
 * A key that acts inside a running stack: the file that sets it for a run (a test, or a shipped
 * recipe its test runs), and how it sets it.
 */
interface RunsWith {
  test: string;
  text: string;
}
/** A key no test yet sees act: why. Listed here so that the gap stays visible. */
interface Gap {
  gap: string;
}

const scheduler = (recipe: Recipe) => schedulerOptionsOf(recipe, 1);
const sampling = (recipe: Recipe) => scheduler(recipe).samplingParams as Record<string, unknown>;
const proxy = (recipe: Recipe) =>
  proxySettingsOf(recipe, { contextWindow: null, maxOutputTokens: null, port: 0 });
const model = (recipe: Recipe) =>
  recipe.engine.kind === 'embedded' ? (modelConfigOf(recipe.engine.model) as Record<string, unknown>) : {};
const loss = (recipe: Recipe) => lossConfigOf(recipe) as Record<string, unknown>;

// Routing replay records what SGLang routed: it needs the cluster stack.
const clusterStack = {
  engine: { kind: 'sglang', router_url: 'http://127.0.0.1:30000' },
  trainer: { kind: 'grpc', address: '127.0.0.1:50051' },
};

const table: Record<string, Arrives | RunsWith | Gap> = {
  name: { test: 'report.test.ts', text: 'name:' },
  seed: { value: 9, probe: (recipe) => dataSourceOptionsOf(recipe).seed },
  output_dir: { test: 'training-run.integration.test.ts', text: 'output_dir:' },
  tokenizer_path: { test: 'training-run.cluster.test.ts', text: 'tokenizer_path:' },
  'data.path': {
    test: 'training-run.integration.test.ts',
    text: "'prompts.jsonl'",
  },
  'data.input_key': { value: 'question', probe: (recipe) => dataSourceOptionsOf(recipe).inputKey },
  'data.label_key': { value: 'answer', probe: (recipe) => dataSourceOptionsOf(recipe).labelKey },
  'data.metadata_key': { value: 'meta', probe: (recipe) => dataSourceOptionsOf(recipe).metadataKey },
  'data.n_samples_per_prompt': { value: 3, probe: (recipe) => scheduler(recipe).nSamplesPerPrompt },
  'data.rollout_batch_size': { value: 3, probe: (recipe) => scheduler(recipe).rolloutBatchSize },
  'data.shuffle': { value: false, probe: (recipe) => dataSourceOptionsOf(recipe).shuffle },
  'rollout.mode': { test: 'training-run.cluster.test.ts', text: 'mode:' },
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
    test: 'settings.integration.test.ts',
    text: 'update_weights_interval: 2',
  },
  'agent.module': { test: 'training-run.integration.test.ts', text: '#WeatherAgent' },
  'agent.sandbox_slots': { test: 'whitebox-sandboxes.test.ts', text: 'sandbox_slots' },
  'blackbox.agent': { test: '../../recipes/blackbox/recipe.yaml', text: 'agent: opencode' },
  'blackbox.slots': { test: '../../recipes/blackbox/recipe.yaml', text: 'slots: 2' },
  'blackbox.backend_options': { test: '../../recipes/blackbox/recipe.yaml', text: 'backend_options:' },
  'blackbox.system_prompt': { test: '../../recipes/blackbox/recipe.yaml', text: 'system_prompt:' },
  'blackbox.max_steps': { test: '../../recipes/blackbox/recipe.yaml', text: 'max_steps: 4' },
  'blackbox.turn_timeout_seconds': {
    test: '../../recipes/blackbox/recipe.yaml',
    text: 'turn_timeout_seconds:',
  },
  'proxy.url': { test: 'training-run.cluster.test.ts', text: 'url:' },
  'proxy.api_key': { value: 'secret', probe: (recipe) => proxy(recipe).apiKey },
  'proxy.token_build_mode': { value: 'snapshot', probe: (recipe) => proxy(recipe).tokenBuildMode },
  'proxy.token_build_model': { value: 'qwen3', probe: (recipe) => proxy(recipe).tokenBuildModel },
  'proxy.chat_template': { gap: 'replaces the template the proxy and warm-start render; no run sets it' },
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
  'engine(embedded).kind': { test: 'training-run.integration.test.ts', text: 'kind: embedded' },
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
  'engine(embedded).vocabulary_texts': { test: 'hooks.test.ts', text: 'vocabulary_texts:' },
  'engine(embedded).port': { test: 'engine-process.test.ts', text: 'port' },
  'engine(embedded).process': { test: 'training-run.integration.test.ts', text: 'process' },
  'engine(sglang).kind': { test: 'training-run.cluster.test.ts', text: 'kind: sglang' },
  'engine(sglang).router_url': { test: 'training-run.cluster.test.ts', text: 'router_url' },
  'trainer(embedded).kind': { test: 'training-run.integration.test.ts', text: 'trainer: { kind: embedded }' },
  'trainer(grpc).kind': { test: 'training-run.cluster.test.ts', text: 'kind: grpc' },
  'trainer(grpc).address': { test: 'training-run.cluster.test.ts', text: 'address' },
  'trainer(grpc).deadline_seconds': { test: 'training-run.cluster.test.ts', text: 'deadline_seconds' },
  'trainer(grpc).worker.python': { test: '../../recipes/weather/torch.yaml', text: 'python:' },
  'trainer(grpc).worker.worker_dir': { test: '../../recipes/weather/torch.yaml', text: 'worker_dir:' },
  'trainer(grpc).worker.actor': { test: '../../recipes/weather/torch.yaml', text: 'actor' },
  'trainer(grpc).worker.processes': { test: '../../recipes/weather/torch.yaml', text: 'processes:' },
  'trainer(grpc).worker.threads': { gap: 'torch threads per worker process; no run sets it' },
  'trainer(grpc).worker.args': { gap: 'further worker flags; no run sets them' },
  'trainer(grpc).slime_check.python': { test: 'dry-run.test.ts', text: 'slime_check' },
  'trainer(grpc).slime_check.worker_dir': { test: 'dry-run.test.ts', text: 'worker_dir' },
  'trainer(grpc).slime_check.args': { test: 'dry-run.test.ts', text: 'args' },
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
  'warm_start.steps': { test: 'training-run.integration.test.ts', text: 'warm_start: { steps: 3' },
  'warm_start.learning_rate': { test: 'warm-start.test.ts', text: 'learning_rate' },
  'warm_start.learning_rate_schedule': { test: 'warm-start.test.ts', text: 'learning_rate_schedule' },
  'warm_start.min_learning_rate': { test: 'warm-start.test.ts', text: 'min_learning_rate' },
  'warm_start.batch_size': { test: 'training-run.integration.test.ts', text: 'batch_size: 16' },
  'warm_start.examples': { test: 'training-run.integration.test.ts', text: 'examples:' },
  'warm_start.cache_dir': { test: 'training-run.learning.test.ts', text: 'warm_start.cache_dir' },
  'training.steps': { test: 'training-run.integration.test.ts', text: 'training: { steps:' },
  'training.global_batch_size': { value: 6, probe: (recipe) => scheduler(recipe).globalBatchSize },
  'training.checkpoint_interval': {
    test: 'training-run.integration.test.ts',
    text: 'checkpoint_interval: 1',
  },
  'training.report_interval': { test: 'settings.integration.test.ts', text: 'report_interval: 1' },
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
    with: { training: { routing_replay: { moe_router_topk: 2 } }, ...clusterStack },
    probe: (recipe) => conversionOptionsOf(recipe, 1, null).numLayers,
  },
  'training.routing_replay.moe_router_topk': {
    value: 3,
    with: { training: { routing_replay: { num_layers: 2 } }, ...clusterStack },
    probe: (recipe) => expansionOptionsOf(recipe).routingReplay?.moeRouterTopk,
  },
  'hooks.generate': { gap: 'a generate function in place of the agent; no run sets it' },
  'hooks.rollout_scheduler': { test: 'hooks.test.ts', text: 'rollout_scheduler:' },
  'hooks.data_source': { test: 'hooks.test.ts', text: 'data_source:' },
  'hooks.convert': { test: 'hooks.test.ts', text: 'convert:' },
  'hooks.reward_post_process': { test: 'hooks.test.ts', text: 'reward_post_process:' },
  'hooks.rollout_log_function': { test: 'hooks.test.ts', text: 'rollout_log_function:' },
  'hooks.reward_modules': { test: 'hooks.test.ts', text: 'reward_modules:' },
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
const parse = (document: unknown): Recipe => recipeSchema.parse(document);

describe('every recipe key reaches the code that acts on it', () => {
  it('has an entry for every key of the schema, and none for a key it lacks', () => {
    const keys = recipeKeys(recipeSchema as unknown as Schema).sort();
    expect(Object.keys(table).sort()).toEqual(keys);
  });

  const arriving = Object.entries(table).filter((entry): entry is [string, Arrives] => 'probe' in entry[1]);
  it.each(arriving)('%s set to another value arrives where it acts', (path, entry) => {
    const setting = mergeRecipeDocuments(documentSetting(path, entry.value), entry.with ?? {});
    const changed = parse(mergeRecipeDocuments(base, setting));
    const expected = entry.expected ?? entry.value;
    expect(entry.probe(changed)).toEqual(expected);
    // The value differs from what the component gets by default: the key is what changed it.
    expect(entry.probe(parse(base))).not.toEqual(expected);
  });

  const running = Object.entries(table).filter((entry): entry is [string, RunsWith] => 'test' in entry[1]);
  it.each(running)('%s is set by a run of %s', (_path, entry) => {
    const text = readFileSync(join(here, entry.test), 'utf8');
    expect(text).toContain(entry.text);
  });

  it('leaves only these keys without a run that sets them', () => {
    const gaps = Object.entries(table).filter(([, entry]) => 'gap' in entry);
    expect(gaps.map(([path]) => path).sort()).toEqual([
      'hooks.generate',
      'proxy.chat_template',
      'trainer(grpc).worker.args',
      'trainer(grpc).worker.threads',
    ]);
  });
});
