import { DressageError, parseWire } from '@dressage/protocol';
import { z } from 'zod';

const positiveInt = z.int().positive();
const nonNegativeInt = z.int().nonnegative();

/**
 * Every setting of the rollout schedulers, in one typed object. Durations are in seconds, like the
 * reference's environment variables. Unset optional fields take the defaults derived from the batch
 * sizes (see {@link resolveSchedulerOptions}).
 */
export const schedulerOptionsSchema = z.strictObject({
  /** Prompt groups per rollout (slime `rollout_batch_size`). */
  rolloutBatchSize: positiveInt,
  /** Samples per prompt group (slime `n_samples_per_prompt`). */
  nSamplesPerPrompt: positiveInt.default(1),
  /** Samples per optimizer step (slime `global_batch_size`); partial-async targets it. */
  globalBatchSize: positiveInt.optional(),
  /** Rollouts in the run (slime `num_rollout`); the last one drains the async worker. */
  numRollout: positiveInt.optional(),
  /** Retries of a failed group before it is given up (`DRESSAGE_ROLLOUT_MAX_RETRIES`). */
  maxRetries: nonNegativeInt.default(2),
  /** Return a batch with nothing trainable instead of failing (`DRESSAGE_ALLOW_EMPTY_TRAIN_BATCH`). */
  allowEmptyTrainBatch: z.boolean().default(false),
  /**
   * Groups in flight in the async worker (`DRESSAGE_ASYNC_MAX_ACTIVE_GROUPS`; default
   * `rolloutBatchSize`, or no limit of its own when `asyncMaxActiveSamples` is set).
   */
  asyncMaxActiveGroups: positiveInt.optional(),
  /**
   * Generate calls running at once in the async worker, counted per sample
   * (`DRESSAGE_ASYNC_MAX_ACTIVE_SAMPLES`; unset: only groups are counted). A finished sample frees
   * its place while its siblings still run.
   */
  asyncMaxActiveSamples: positiveInt.optional(),
  /**
   * Groups in flight plus completed groups not yet collected (`DRESSAGE_ASYNC_MAX_OUTSTANDING_GROUPS`;
   * unset: no limit besides the output queue). Bounds what is generated ahead of the trainer.
   */
  asyncMaxOutstandingGroups: positiveInt.optional(),
  /** Completed groups the worker may hold (`DRESSAGE_ASYNC_OUTPUT_QUEUE_SIZE`); dispatch pauses above 80%. */
  asyncOutputQueueSize: positiveInt.default(1000),
  /** Exhausted failed groups one call may drop before it fails (`DRESSAGE_ASYNC_MAX_DROPPED_FAILED_GROUPS`; default max(target × 10, 100)). */
  asyncMaxDroppedFailedGroups: nonNegativeInt.optional(),
  /** Seconds without a completed group before a warning, repeated (`DRESSAGE_ASYNC_NO_PROGRESS_WARN_SEC`). */
  asyncNoProgressWarnSec: z.number().positive().default(600),
  /** Seconds to wait for cancelled tasks when the worker stops (`DRESSAGE_ASYNC_WORKER_STOP_TIMEOUT_SEC`). */
  asyncWorkerStopTimeoutSec: z.number().nonnegative().default(300),
  /** Stop the fully-async worker after the final rollout (`DRESSAGE_DRAIN_FULLY_ASYNC_WORKER_ON_FINAL_ROLLOUT`). */
  drainFullyAsyncWorkerOnFinalRollout: z.boolean().default(true),
  /** Stop the partial-async worker after the final rollout (`DRESSAGE_DRAIN_PARTIAL_WORKER_ON_FINAL_ROLLOUT`). */
  drainPartialWorkerOnFinalRollout: z.boolean().default(true),
  /** Groups a partial-async call returns (`DRESSAGE_PARTIAL_ROLLOUT_TARGET_GROUPS`), clamped to [1, rolloutBatchSize]. */
  partialRolloutTargetGroups: z.int().optional(),
  /** Samples a partial-async call returns (`DRESSAGE_PARTIAL_ROLLOUT_TARGET_SAMPLES`); rounded up to whole groups. */
  partialRolloutTargetSamples: z.int().optional(),
  /** Keep only groups from the newest N observed weight versions (`dressage_staleness_keep_versions`); 0 = off. */
  stalenessKeepVersions: nonNegativeInt.nullable().default(0),
  /**
   * With `stalenessKeepVersions`, stop a group in flight as soon as a finished sample rules it out
   * (`DRESSAGE_STALENESS_RECALL_IN_FLIGHT`), counting the trainer's next version once a batch is
   * full, and put its prompt back into the data source while retries remain.
   */
  stalenessRecallInFlight: z.boolean().default(false),
  /** Passed to every generate call unchanged. */
  samplingParams: z.record(z.string(), z.unknown()).default({}),
});

/** Options as a caller writes them: only `rolloutBatchSize` is required. */
export type SchedulerOptionsInput = z.input<typeof schedulerOptionsSchema>;
/** Options after defaults. */
export type SchedulerOptions = z.output<typeof schedulerOptionsSchema>;

type IntegerKey =
  | 'maxRetries'
  | 'asyncMaxActiveGroups'
  | 'asyncMaxActiveSamples'
  | 'asyncMaxOutstandingGroups'
  | 'asyncOutputQueueSize'
  | 'asyncMaxDroppedFailedGroups'
  | 'partialRolloutTargetGroups'
  | 'partialRolloutTargetSamples';
type NumberKey = 'asyncNoProgressWarnSec' | 'asyncWorkerStopTimeoutSec';
type BooleanKey =
  | 'allowEmptyTrainBatch'
  | 'stalenessRecallInFlight'
  | 'drainFullyAsyncWorkerOnFinalRollout'
  | 'drainPartialWorkerOnFinalRollout';

/** Each environment variable of the reference and the option it sets. */
export const schedulerEnvironmentVariables = {
  DRESSAGE_ROLLOUT_MAX_RETRIES: 'maxRetries',
  DRESSAGE_ALLOW_EMPTY_TRAIN_BATCH: 'allowEmptyTrainBatch',
  DRESSAGE_ASYNC_MAX_ACTIVE_GROUPS: 'asyncMaxActiveGroups',
  DRESSAGE_ASYNC_MAX_ACTIVE_SAMPLES: 'asyncMaxActiveSamples',
  DRESSAGE_ASYNC_MAX_OUTSTANDING_GROUPS: 'asyncMaxOutstandingGroups',
  DRESSAGE_ASYNC_OUTPUT_QUEUE_SIZE: 'asyncOutputQueueSize',
  DRESSAGE_ASYNC_MAX_DROPPED_FAILED_GROUPS: 'asyncMaxDroppedFailedGroups',
  DRESSAGE_ASYNC_NO_PROGRESS_WARN_SEC: 'asyncNoProgressWarnSec',
  DRESSAGE_ASYNC_WORKER_STOP_TIMEOUT_SEC: 'asyncWorkerStopTimeoutSec',
  DRESSAGE_DRAIN_FULLY_ASYNC_WORKER_ON_FINAL_ROLLOUT: 'drainFullyAsyncWorkerOnFinalRollout',
  DRESSAGE_DRAIN_PARTIAL_WORKER_ON_FINAL_ROLLOUT: 'drainPartialWorkerOnFinalRollout',
  DRESSAGE_STALENESS_RECALL_IN_FLIGHT: 'stalenessRecallInFlight',
  DRESSAGE_PARTIAL_ROLLOUT_TARGET_GROUPS: 'partialRolloutTargetGroups',
  DRESSAGE_PARTIAL_ROLLOUT_TARGET_SAMPLES: 'partialRolloutTargetSamples',
} as const satisfies Record<string, IntegerKey | NumberKey | BooleanKey>;

const booleanKeys = new Set<string>([
  'allowEmptyTrainBatch',
  'stalenessRecallInFlight',
  'drainFullyAsyncWorkerOnFinalRollout',
  'drainPartialWorkerOnFinalRollout',
]);
const numberKeys = new Set<string>(['asyncNoProgressWarnSec', 'asyncWorkerStopTimeoutSec']);
const trueWords = new Set(['1', 'true', 'yes', 'on']);
const falseWords = new Set(['0', 'false', 'no', 'off']);

function envError(name: string, raw: string, expected: string): DressageError {
  return new DressageError({
    code: 'invalid_argument',
    message: `${name}=${JSON.stringify(raw)} is not ${expected}`,
    details: { variable: name, value: raw },
  });
}

/**
 * Reads the scheduler's environment variables. Unset or empty variables are left out; a value that
 * does not parse fails with `invalid_argument` naming the variable (never silently ignored).
 */
export function schedulerOptionsFromEnv(
  env: Readonly<Record<string, string | undefined>> = process.env,
): Partial<SchedulerOptionsInput> {
  const options: { [Key in IntegerKey | NumberKey | BooleanKey]?: number | boolean } = {};
  for (const [name, key] of Object.entries(schedulerEnvironmentVariables)) {
    const raw = env[name];
    if (raw === undefined || raw.trim() === '') continue;
    const value = raw.trim().toLowerCase();
    if (booleanKeys.has(key)) {
      if (trueWords.has(value)) options[key] = true;
      else if (falseWords.has(value)) options[key] = false;
      else throw envError(name, raw, 'a boolean (1/true/yes/on or 0/false/no/off)');
    } else if (numberKeys.has(key)) {
      const parsed = Number(value);
      if (!Number.isFinite(parsed)) throw envError(name, raw, 'a number');
      options[key] = parsed;
    } else {
      if (!/^[+-]?\d+$/.test(value)) throw envError(name, raw, 'an integer');
      options[key] = Number.parseInt(value, 10);
    }
  }
  return options as Partial<SchedulerOptionsInput>;
}

/** Where {@link resolveSchedulerOptions} reads from. */
export interface ResolveOptionsSources {
  /** Environment to read; default `process.env`. Pass `{}` to ignore the environment. */
  env?: Readonly<Record<string, string | undefined>>;
}

/**
 * Validates and completes scheduler options. Precedence: explicit `options` > environment > defaults.
 * Errors name the offending field.
 */
export function resolveSchedulerOptions(
  options: SchedulerOptionsInput,
  sources: ResolveOptionsSources = {},
): SchedulerOptions {
  const fromEnv = schedulerOptionsFromEnv(sources.env ?? process.env);
  const defined = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined));
  return parseWire(schedulerOptionsSchema, { ...fromEnv, ...defined }, 'scheduler options');
}

/** How many groups a partial-async call returns, and why. */
export interface PartialRolloutTarget {
  groups: number;
  samples: number;
  /** Set when the sample target is not a whole number of groups. */
  warning?: string;
}

function clamp(value: number, low: number, high: number): number {
  return Math.min(high, Math.max(low, value));
}

/**
 * The partial-async target: `partialRolloutTargetGroups` clamped to [1, rolloutBatchSize]; else the
 * sample target (`partialRolloutTargetSamples`, or `globalBatchSize` when smaller than a full rollout,
 * else a full rollout) rounded up to whole groups and clamped the same way.
 */
export function partialRolloutTarget(options: SchedulerOptions): PartialRolloutTarget {
  const { rolloutBatchSize, nSamplesPerPrompt, globalBatchSize } = options;
  if (options.partialRolloutTargetGroups !== undefined) {
    const groups = clamp(options.partialRolloutTargetGroups, 1, rolloutBatchSize);
    return { groups, samples: groups * nSamplesPerPrompt };
  }
  const full = rolloutBatchSize * nSamplesPerPrompt;
  const samples =
    options.partialRolloutTargetSamples ??
    (globalBatchSize !== undefined && globalBatchSize < full ? globalBatchSize : full);
  const groups = clamp(Math.ceil(samples / nSamplesPerPrompt), 1, rolloutBatchSize);
  const warning =
    samples % nSamplesPerPrompt === 0
      ? undefined
      : `partial rollout target of ${samples} samples is not a multiple of n_samples_per_prompt=${nSamplesPerPrompt}; returning ${groups} whole groups`;
  return warning === undefined ? { groups, samples } : { groups, samples, warning };
}
