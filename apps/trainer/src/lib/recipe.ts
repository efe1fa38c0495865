import { readFile } from 'node:fs/promises';
import { dirname, isAbsolute, resolve } from 'node:path';
import { builtinAdapterOptionsSchemas, proxyOptionsSchema } from '@dressage/paddock';
import { DressageError, parseWire } from '@dressage/protocol';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { applyRecipeEnvironment, type Environment } from './recipe-environment.js';

/** A hook given by module path: `./file.ts#exportName`, `package/subpath#exportName`, or a bare module (default export). */
export const hookReferenceSchema = z
  .string()
  .min(1)
  .regex(/^[^#]+(#[A-Za-z_$][\w$]*)?$/, 'must be "module" or "module#export"');

const positiveInteger = z.int().positive();

/** How rollouts are scheduled against training. */
export const rolloutModeSchema = z.enum(['sync', 'fully-async', 'partial-async']);

/** The policy-loss settings passed to the trainer with every batch. */
export const lossSchema = z.strictObject({
  advantage_estimator: z
    .enum(['grpo', 'gspo', 'reinforce_plus_plus', 'reinforce_plus_plus_baseline'])
    .default('grpo'),
  eps_clip: z.number().positive().default(0.2),
  /**
   * Divide each group's centred rewards by the group's standard deviation (GRPO and GSPO). `false`
   * is Dr. GRPO (slime's `--disable-grpo-std-normalization`): a group where one sample of eight
   * failed then weighs that sample -0.875 instead of -2.65, so a nearly solved task is not
   * trained as hard as an unsolved one.
   */
  grpo_std_normalization: z.boolean().default(true),
  eps_clip_high: z.number().positive().optional(),
  eps_clip_c: z.number().gt(1).optional(),
  /**
   * Truncated importance sampling against the rollout logprobs (slime's `--use-tis`). Unset: on in
   * the async modes, whose batches hold tokens of older weights, off in sync mode.
   */
  use_tis: z.boolean().optional(),
  /**
   * The rollout logprobs as the PPO old policy (slime's `--use-rollout-logprobs`), so that the clip
   * bounds each token's ratio against the weights that sampled it. Excludes `use_tis`; with it set,
   * `use_tis` defaults to off.
   */
  use_rollout_logprobs: z.boolean().default(false),
  tis_clip: z.number().positive().default(2),
  tis_clip_low: z.number().nonnegative().default(0),
  use_kl_loss: z.boolean().default(false),
  kl_loss_coef: z.number().nonnegative().default(0),
  kl_loss_type: z.enum(['k1', 'k2', 'k3', 'low_var_kl']).default('k1'),
  entropy_coef: z.number().nonnegative().default(0),
  calculate_per_token_loss: z.boolean().default(false),
  learning_rate: z.number().positive().default(1e-6),
  /**
   * Gradient-spike clip (> 1): a step whose gradient norm exceeds this multiple of the median norm
   * of the last 20 RL steps is scaled down to it before the optimizer step. Adam turns one rare
   * large gradient into a step of about 3× the learning rate on every weight it touches, repeated by
   * its momentum; a nearly solved task produces such gradients from its few failures. Unset: no
   * spike clip (the fixed clip at norm 1 still applies).
   */
  clip_grad_spike: z.number().gt(1).optional(),
});

/** The embedded tfjs model's shape. */
export const embeddedModelSchema = z.strictObject({
  layers: positiveInteger.default(2),
  d_model: positiveInteger.default(64),
  heads: positiveInteger.default(4),
  ffn: positiveInteger.optional(),
  context: positiveInteger.default(512),
  seed: z.int().default(1),
  /** `rotary` (default), `alibi` or `sinusoidal` positions. */
  positions: z.enum(['rotary', 'alibi', 'sinusoidal']).default('rotary'),
  /** `fan_in` (default) or `small` (0.02) initialization scale. */
  initialization: z.enum(['fan_in', 'small']).default('fan_in'),
});

/** Where generation runs: the embedded engine, or SGLang behind a router. */
export const engineSchema = z.discriminatedUnion('kind', [
  z.strictObject({
    kind: z.literal('embedded'),
    model: embeddedModelSchema.prefault({}),
    /** Texts whose token ids make up the compact vocabulary, besides the prompts and the template. */
    vocabulary_texts: z.array(z.string()).default([]),
    port: z.int().min(0).max(65535).default(0),
    /**
     * `own`: the engine runs in a child process, so generation uses its own core while the trainer
     * trains, and weights reach it as checkpoint files. `shared`: in the trainer's process (one
     * thread for both). Unset: `own` in the async modes, whose rollouts run during training, and
     * `shared` in sync mode, where nothing would overlap.
     */
    process: z.enum(['own', 'shared']).optional(),
  }),
  z.strictObject({
    kind: z.literal('sglang'),
    router_url: z.url(),
  }),
]);

/** Where training runs: the embedded trainer in process, or a TrainerService at an address. */
export const trainerSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('embedded') }),
  z.strictObject({
    kind: z.literal('grpc'),
    /** `host:port` of a running TrainerService; unset when `worker` starts one. */
    address: z.string().min(1).optional(),
    deadline_seconds: z.number().positive().default(3600),
    /**
     * A TrainerService the app starts and stops itself, beside the embedded engine: the Python
     * worker's `--actor torch` (PyTorch, `processes` data-parallel ranks), given the engine's initial
     * weights and URL, publishing each update to it. Needs `engine.kind: embedded`.
     */
    worker: z
      .strictObject({
        python: z.string().min(1).default('/usr/bin/python3'),
        worker_dir: z.string().min(1),
        actor: z.enum(['torch']).default('torch'),
        processes: positiveInteger.default(1),
        /** torch threads per process; 0 leaves torch's default. */
        threads: z.int().nonnegative().default(0),
        /** Further worker flags, separated by whitespace (no shell quoting). */
        args: z
          .string()
          .default('')
          .transform((flags) => flags.split(/\s+/).filter((flag) => flag.length > 0)),
      })
      .optional(),
    /**
     * The Megatron worker's launch, for `--dry-run`: runs `python -m dressage_megatron_worker
     * --dry-run -- args` in `worker_dir` (slime importable, slime's own argument parsing, GPUs,
     * engine ownership). Run the dry run where the worker starts.
     */
    slime_check: z
      .strictObject({
        python: z.string().min(1).default('python3'),
        worker_dir: z.string().min(1),
        /** The flags after the worker's `--`, separated by whitespace (no shell quoting). */
        args: z.string().transform((flags) => flags.split(/\s+/).filter((flag) => flag.length > 0)),
      })
      .optional(),
  }),
]);

/** A supervised warm-start before RL, through the same TrainerService. */
export const warmStartSchema = z.strictObject({
  steps: z.int().nonnegative().default(0),
  learning_rate: z.number().positive().default(3e-3),
  /**
   * How the learning rate moves over the warm-start: `constant`, or `cosine` from `learning_rate`
   * down to `min_learning_rate` at the last step (a supervised run that ends on a high rate leaves
   * the weights wherever its last noisy batches pushed them).
   */
  learning_rate_schedule: z.enum(['constant', 'cosine']).default('constant'),
  min_learning_rate: z.number().nonnegative().default(0),
  batch_size: positiveInteger.default(64),
  /** `module#export` of a function giving the supervised examples of one prompt record. */
  examples: hookReferenceSchema.optional(),
  /**
   * A folder (relative to the recipe) where the warm-started trainer state is kept, keyed by a hash
   * of everything that determines it (model, seed, batches, settings): a later run with the same
   * key loads it instead of repeating the warm-start. Unset or null (to turn off an inherited
   * one): no cache. `dressage warm-start --recipe FILE` writes it anew.
   */
  cache_dir: z.string().min(1).nullable().optional(),
});

/** The recorded proxy in front of the engine. */
export const proxySchema = z.strictObject({
  /**
   * Use a running proxy instead of starting one. With the embedded engine it must route to the
   * engine's `engine.port`.
   */
  url: z.url().optional(),
  api_key: z.string().default('no-auth'),
  token_build_mode: z.enum(['tito', 'snapshot']).default('tito'),
  /** The renderer family; it must reproduce the chat template in force, else the proxy refuses. */
  token_build_model: z.enum(['qwen3_5', 'qwen3_6', 'qwen3']).default('qwen3_5'),
  /** A Jinja chat template file replacing the model directory's (SGLang's `--chat-template`). */
  chat_template: z.string().min(1).optional(),
  context_window: positiveInteger.optional(),
  max_output_tokens: positiveInteger.optional(),
  /**
   * Continue generations a weight update preempts, on the new weights. Unset: on in the async modes
   * (off, every update would fail the requests in flight), off in sync mode (nothing is in flight).
   */
  partial_rollout: z.boolean().optional(),
  max_partial_rollout_preempts: z.int().nonnegative().optional(),
  record_token_versions: z.boolean().default(true),
  /** Pause the proxy's rollouts around every weight update (`DRESSAGE_PROXY_PAUSE_AROUND_WEIGHT_UPDATE`). */
  pause_around_weight_update: z.boolean().default(true),
  /**
   * A pause that fails or does not quiesce stops the run before the weights move
   * (`DRESSAGE_PROXY_PAUSE_REQUIRED`); false updates anyway and says so in the log.
   */
  pause_required: z.boolean().default(true),
  /** Seconds a pause waits for aborted generations to return (`DRESSAGE_PROXY_PAUSE_TIMEOUT_SEC`). */
  pause_timeout_seconds: positiveInteger.default(300),
  /**
   * The proxy's `--mask-nonlast-version-tokens`: in a trajectory whose trainable tokens come from
   * more than one weight version (a partial rollout continued on new weights), train only the last
   * version's tokens. Set on a proxy started here and applied when segments become samples (so a
   * proxy at `proxy.url` started without the flag is covered too).
   */
  mask_nonlast_version_tokens: z.boolean().default(false),
  /** Listen address of a proxy started here; `0.0.0.0` (agents on other machines) is a deliberate choice. */
  host: z.string().min(1).default('127.0.0.1'),
  port: z.int().min(0).max(65535).default(0),
});

/**
 * A blackbox agent: an agent CLI in bubblewrap sandboxes on this machine, acting through the proxy.
 * Each sample leases a sandbox, registers the agent, runs the record's `before_agent` commands, one
 * turn with the prompt, the `after_agent` commands (their results reach the reward as
 * `metadata.execute_cmds`), then finalizes its trajectory.
 */
export const blackboxSchema = z
  .strictObject({
    /** The adapter (`blackbox_type`): one of paddock's five built-in adapters. */
    agent: z.enum(['opencode', 'qwen_code', 'claude_code', 'codex', 'openclaw']).default('opencode'),
    /** Sandboxes run at once (the pool's slots). */
    slots: positiveInteger.default(2),
    /**
     * The adapter's `backend_options`, checked here with the adapter's own schema. `proxy` holds the
     * agent-side LLM proxy's settings except `max_steps` (that is `max_steps` below).
     */
    backend_options: z.record(z.string(), z.unknown()).default({}),
    /** A file (relative to the recipe) whose text replaces the agent's own system prompt. */
    system_prompt: z.string().min(1).optional(),
    /** Model requests per turn before the turn ends with `max_steps_exceeded`. */
    max_steps: positiveInteger.default(8),
    /** Seconds a turn may take. */
    turn_timeout_seconds: positiveInteger.default(600),
  })
  .superRefine((blackbox, context) => {
    // The options the sandboxed BlackboxServer would refuse at register time, refused at load time.
    const { proxy, ...options } = blackbox.backend_options;
    const addIssues = (error: z.ZodError, prefix: readonly PropertyKey[]) => {
      for (const issue of error.issues) {
        context.addIssue({
          code: 'custom',
          path: [...prefix, ...issue.path],
          message: `${blackbox.agent}: ${issue.message}`,
        });
      }
    };
    const parsed = builtinAdapterOptionsSchemas[blackbox.agent].safeParse(options);
    if (!parsed.success) addIssues(parsed.error, ['backend_options']);
    if (proxy === undefined) return;
    if (typeof proxy === 'object' && proxy !== null && 'max_steps' in proxy) {
      context.addIssue({
        code: 'custom',
        path: ['backend_options', 'proxy', 'max_steps'],
        message: 'set blackbox.max_steps instead',
      });
      return;
    }
    const proxyParsed = proxyOptionsSchema.safeParse(proxy);
    if (!proxyParsed.success) addIssues(proxyParsed.error, ['backend_options', 'proxy']);
  });

/** Every pluggable hook, by module path. */
export const hooksSchema = z.strictObject({
  generate: hookReferenceSchema.optional(),
  rollout_scheduler: hookReferenceSchema.optional(),
  data_source: hookReferenceSchema.optional(),
  convert: hookReferenceSchema.optional(),
  reward_post_process: hookReferenceSchema.optional(),
  rollout_log_function: hookReferenceSchema.optional(),
  reward_modules: z.array(z.string().min(1)).default([]),
});

/** A training recipe, as written in YAML. Relative paths resolve against the recipe file. */
export const recipeSchema = z
  .strictObject({
    name: z.string().min(1),
    seed: z.int().default(1),
    output_dir: z.string().min(1),
    tokenizer_path: z.string().min(1).optional(),
    data: z.strictObject({
      path: z.string().min(1),
      input_key: z.string().default('prompt'),
      label_key: z.string().default('label'),
      metadata_key: z.string().default('metadata'),
      n_samples_per_prompt: positiveInteger.default(8),
      rollout_batch_size: positiveInteger.default(8),
      shuffle: z.boolean().default(true),
    }),
    rollout: z
      .strictObject({
        mode: rolloutModeSchema.default('sync'),
        temperature: z.number().min(0).default(1),
        top_p: z.number().gt(0).max(1).default(1),
        max_new_tokens: positiveInteger.default(64),
        /** Model requests a whitebox agent may make per sample; `context.chat` refuses the next one. */
        max_turns: positiveInteger.default(4),
        max_retries: z.int().nonnegative().default(2),
        keep_versions: positiveInteger.optional(),
        // Async rollout budget and early recall (the scheduler's asyncMaxActiveSamples,
        // asyncMaxOutstandingGroups, stalenessRecallInFlight; its defaults when unset).
        max_active_samples: positiveInteger.optional(),
        max_outstanding_groups: positiveInteger.optional(),
        recall_stale_groups: z.boolean().optional(),
        /**
         * Publish the trained weights to the engine after every this many RL steps (slime's
         * `--update-weights-interval`); the rollouts in between keep sampling the older weights.
         */
        update_weights_interval: positiveInteger.default(1),
      })
      .prefault({}),
    agent: z
      .strictObject({
        module: hookReferenceSchema,
        /**
         * Sandboxes at once for an agent that extends `PaddockWhiteboxAgent` (network-less bubblewrap
         * slots where its shell and file tools run; one per sample in flight). Default 2; refused for
         * an agent without a sandbox.
         */
        sandbox_slots: positiveInteger.optional(),
      })
      .optional(),
    blackbox: blackboxSchema.optional(),
    proxy: proxySchema.prefault({}),
    engine: engineSchema,
    trainer: trainerSchema,
    loss: lossSchema.prefault({}),
    warm_start: warmStartSchema.prefault({}),
    training: z.strictObject({
      steps: positiveInteger,
      global_batch_size: positiveInteger.optional(),
      checkpoint_interval: positiveInteger.default(10),
      /** Rewrite `report.html` after every this many RL steps (and at the end), to watch a long run. */
      report_interval: positiveInteger.default(10),
      /**
       * The longest sequence the trainer takes (tokens): a longer sample is cut to it, its loss
       * mask, logprobs and versions with it, and marked truncated. Unset: no limit.
       */
      max_sequence_length: positiveInteger.optional(),
      /**
       * slime's `--max-tokens-per-gpu`: a segment longer than `max_tokens_per_gpu ×
       * context_parallel_size` is truncated when it becomes a sample. Unset: no cap.
       */
      max_tokens_per_gpu: positiveInteger.optional(),
      /** slime's `--context-parallel-size`: the token cap's factor. */
      context_parallel_size: positiveInteger.default(1),
      /**
       * MoE routing replay (R3, slime's `--use-rollout-routing-replay`): the proxy records the
       * experts the engine routed every token to and the trainer replays them. The model's shape,
       * as the worker's `--num-layers` and `--moe-router-topk`. Unset: off.
       */
      routing_replay: z
        .strictObject({ num_layers: positiveInteger, moe_router_topk: positiveInteger })
        .optional(),
    }),
    hooks: hooksSchema.prefault({}),
  })
  .superRefine((recipe, context) => {
    if (
      recipe.trainer.kind === 'grpc' &&
      recipe.trainer.address === undefined &&
      recipe.trainer.worker === undefined
    ) {
      context.addIssue({
        code: 'custom',
        path: ['trainer', 'address'],
        message: 'a grpc trainer needs an address (a running TrainerService) or a worker the app starts',
      });
    }
    if (
      recipe.trainer.kind === 'grpc' &&
      recipe.trainer.worker !== undefined &&
      recipe.engine.kind !== 'embedded'
    ) {
      context.addIssue({
        code: 'custom',
        path: ['trainer', 'worker'],
        message: "trainer.worker trains the embedded engine's model: it needs engine.kind embedded",
      });
    }
    if (recipe.training.routing_replay !== undefined && recipe.engine.kind !== 'sglang') {
      context.addIssue({
        code: 'custom',
        path: ['training', 'routing_replay'],
        message:
          'routing replay needs a mixture-of-experts model served by SGLang (engine.kind sglang) and the ' +
          'Megatron worker with --use-rollout-routing-replay; the embedded engine has no experts',
      });
    }
    if (recipe.loss.use_tis === true && recipe.loss.use_rollout_logprobs) {
      context.addIssue({
        code: 'custom',
        path: ['loss', 'use_tis'],
        message:
          'use_tis cannot be combined with use_rollout_logprobs: with the rollout logprobs as the old ' +
          'policy the importance weight is always 1 (choose one correction)',
      });
    }
    if (recipe.rollout.mode !== 'sync' && recipe.proxy.partial_rollout === false) {
      context.addIssue({
        code: 'custom',
        path: ['proxy', 'partial_rollout'],
        message:
          `rollout.mode ${recipe.rollout.mode} keeps requests in flight across weight updates; with ` +
          'partial_rollout false the proxy fails every one of them (502 generation_preempted) and the ' +
          'batch loses them. Remove the line (async modes continue preempted requests) or use mode sync',
      });
    }
  })
  .transform((recipe) => {
    const asynchronous = recipe.rollout.mode !== 'sync';
    return {
      ...recipe,
      proxy: { ...recipe.proxy, partial_rollout: recipe.proxy.partial_rollout ?? asynchronous },
      loss: {
        ...recipe.loss,
        use_tis: recipe.loss.use_tis ?? (asynchronous && !recipe.loss.use_rollout_logprobs),
      },
    };
  });

/** A validated recipe with defaults filled in. */
export type Recipe = z.output<typeof recipeSchema>;

/** A recipe together with the file it came from (for resolving relative paths). */
export interface LoadedRecipe {
  recipe: Recipe;
  /** Absolute path of the recipe file. */
  path: string;
  /** Resolves a path written in the recipe against the recipe's directory. */
  resolvePath(path: string): string;
}

function parseYamlDocument(text: string, source: string): unknown {
  try {
    return parseYaml(text);
  } catch (error) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${source}: not valid YAML: ${(error as Error).message}`,
      cause: error,
    });
  }
}

/**
 * Parses recipe YAML text; errors name the bad field's path. Keys the recipe leaves unset that an
 * environment variable gives take its value ({@link applyRecipeEnvironment}); pass `{}` as `env`
 * to read the recipe alone.
 */
export function parseRecipe(text: string, source = 'recipe', env: Environment = process.env): Recipe {
  return parseWire(recipeSchema, applyRecipeEnvironment(parseYamlDocument(text, source), env), source);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `override` laid over `base`: objects merge key by key, anything else (lists too) replaces. */
export function mergeRecipeDocuments(base: unknown, override: unknown): unknown {
  if (!isPlainObject(base) || !isPlainObject(override)) return override;
  const merged: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(override)) merged[key] = mergeRecipeDocuments(base[key], value);
  return merged;
}

async function readRecipeDocument(absolute: string, chain: readonly string[]): Promise<unknown> {
  if (chain.includes(absolute)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${absolute}: extends forms a cycle (${[...chain, absolute].join(' → ')})`,
    });
  }
  let text: string;
  try {
    text = await readFile(absolute, 'utf8');
  } catch (error) {
    throw new DressageError({
      code: 'not_found',
      message: `Cannot read recipe ${absolute}: ${(error as Error).message}`,
      cause: error,
    });
  }
  const document = parseYamlDocument(text, absolute);
  if (!isPlainObject(document) || document.extends === undefined) return document;
  const { extends: base, ...rest } = document;
  if (typeof base !== 'string' || base === '') {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${absolute}: extends must be the path of another recipe file`,
    });
  }
  const basePath = isAbsolute(base) ? base : resolve(dirname(absolute), base);
  return mergeRecipeDocuments(await readRecipeDocument(basePath, [...chain, absolute]), rest);
}

/**
 * Reads and validates a recipe file. A recipe may start from another one (`extends: recipe.yaml`,
 * relative to its own folder) and change only some fields: objects merge key by key, lists and
 * values replace. Relative paths then resolve against the extending recipe's folder. One precedence
 * for every setting: a value the recipe (or a recipe it extends) writes, else the environment
 * variable of the key ({@link applyRecipeEnvironment}), else the default.
 */
export async function loadRecipe(path: string, env: Environment = process.env): Promise<LoadedRecipe> {
  const absolute = resolve(path);
  const document = applyRecipeEnvironment(await readRecipeDocument(absolute, []), env);
  const recipe = parseWire(recipeSchema, document, absolute);
  const base = dirname(absolute);
  return {
    recipe,
    path: absolute,
    resolvePath: (value) => (isAbsolute(value) ? value : resolve(base, value)),
  };
}
