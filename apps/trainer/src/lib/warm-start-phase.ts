// The supervised warm-start phase of a run, and the cache of its result.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm } from 'node:fs/promises';
import { join, relative } from 'node:path';
import type { PackedTrainBatch } from '@dressage/protocol';
import type { TrainerClient } from '@dressage/trainer-bridge';
import type { EmbeddedStack } from './embedded-stack.js';
import type { MetricsLog } from './metrics-log.js';
import { formatDuration, type Progress } from './progress.js';
import type { LoadedRecipe, Recipe } from './recipe.js';
import { publish, type RunContext } from './run-context.js';
import { prefixed, seconds } from './run-figures.js';
import { warmStartTrainOptionsOf } from './warm-start.js';

/** Where the run's warm-started weights came from. */
export interface WarmStartSummary {
  /** `trained`: the steps ran in this run; `cached`: loaded from `warm_start.cache_dir`; `none`: no warm-start. */
  source: 'trained' | 'cached' | 'none';
  /** The cache entry read or written; null without `warm_start.cache_dir`. */
  path: string | null;
  seconds: number;
}

/**
 * Supervised warm-start through the same TrainerService (a model that sometimes succeeds), or its
 * cached result; the engine then serves the warm-started weights.
 */
export async function runWarmStart(run: RunContext): Promise<WarmStartSummary> {
  const { loaded, recipe, options, stack, log, progress } = run;
  const trainer = stack.trainer;
  const warmStarted = performance.now();
  const cache = await warmStartCachePath(loaded, stack.warmStartBatches, run.plan.dataPath);
  let summary: WarmStartSummary;
  if (cache !== null && existsSync(cache) && options.freshWarmStart !== true) {
    await trainer.loadCheckpoint({ path: cache });
    summary = { source: 'cached', path: cache, seconds: seconds(warmStarted) };
    log(`warm-start: loaded ${recipe.warm_start.steps} supervised steps from ${displayPath(cache)}`);
  } else {
    if (cache !== null && options.freshWarmStart !== true)
      log(`warm-start: nothing cached at ${displayPath(cache)}; training ${recipe.warm_start.steps} steps`);
    const completed = await warmStart(
      trainer,
      stack,
      recipe,
      run.metricsLog,
      progress,
      run.started,
      options.signal,
    );
    if (cache !== null && !options.signal?.aborted) {
      // Written beside, then renamed: a run killed mid-write or a concurrent run never reads half.
      const partial = `${cache}.partial-${process.pid}`;
      await trainer.saveCheckpoint({ path: partial, rollout_id: 0 });
      if (options.freshWarmStart === true) await rm(cache, { recursive: true, force: true });
      await rename(partial, cache).catch(() => rm(partial, { recursive: true, force: true }));
    }
    summary = { source: 'trained', path: cache, seconds: seconds(warmStarted) };
    progress.endPhase(
      `warm-start: ${completed} supervised steps in ${formatDuration(summary.seconds)}` +
        (cache === null || options.signal?.aborted ? '' : `, saved to ${displayPath(cache)}`),
    );
  }
  await publish(run, 'initial_weight_update');
  return summary;
}

/** Paths under the working directory are shown relative to it: shorter, and what a user types. */
function displayPath(path: string): string {
  const relativePath = relative(process.cwd(), path);
  return relativePath.startsWith('..') || relativePath === '' ? path : relativePath;
}

/**
 * The supervised warm-start: `warm_start.steps` sft steps over the stack's batches, in turn.
 * Returns the steps completed (fewer when stopped).
 */
async function warmStart(
  trainer: TrainerClient,
  stack: EmbeddedStack,
  recipe: Recipe,
  metricsLog: MetricsLog,
  progress: Progress,
  started: number,
  signal: AbortSignal | undefined,
): Promise<number> {
  progress.begin('warm_start');
  let index = 0;
  for (; index < recipe.warm_start.steps; index++) {
    if (signal?.aborted) break;
    const batch = stack.warmStartBatches[index % stack.warmStartBatches.length] as PackedTrainBatch;
    const response = await trainer.train(batch, warmStartTrainOptionsOf(recipe, index));
    const metrics = prefixed('warm_start/', response.metrics);
    await metricsLog.append({ step: index, time: seconds(started), phase: 'warm_start', metrics });
    progress.update({ step: index + 1, totalSteps: recipe.warm_start.steps, phase: 'warm_start' });
  }
  return index;
}

/**
 * Where the warm-started trainer state of this recipe is cached: a hash of everything the
 * warm-start's result depends on (the model and its seed, the vocabulary's sources, the batches
 * token for token, the settings), so any change starts a fresh warm-start. Null without
 * `warm_start.cache_dir`.
 */
export async function warmStartCachePath(
  loaded: LoadedRecipe,
  batches: readonly PackedTrainBatch[],
  dataPath: string,
): Promise<string | null> {
  const { recipe } = loaded;
  const cacheDirectory = recipe.warm_start.cache_dir;
  if (cacheDirectory === undefined || cacheDirectory === null) return null;
  const hash = createHash('sha256');
  hash.update(
    JSON.stringify({
      // The model's shape and vocabulary, not where or how the engine runs (port, process).
      model:
        recipe.engine.kind === 'embedded'
          ? { ...recipe.engine.model, vocabulary_texts: recipe.engine.vocabulary_texts }
          : recipe.engine.kind,
      // A checkpoint is the trainer's own format: a torch worker's is not the embedded trainer's.
      trainer: recipe.trainer.kind === 'embedded' ? 'embedded' : (recipe.trainer.worker?.actor ?? 'grpc'),
      warm_start: { ...recipe.warm_start, cache_dir: null },
      temperature: recipe.rollout.temperature,
      tokenizer: recipe.tokenizer_path ?? null,
      seed: recipe.seed,
    }),
  );
  hash.update(await readFile(dataPath));
  for (const batch of batches) {
    for (const column of [batch.tokens, batch.total_lengths, batch.response_lengths, batch.loss_masks])
      hash.update(new Uint8Array(column.buffer, column.byteOffset, column.byteLength));
  }
  const directory = loaded.resolvePath(cacheDirectory);
  await mkdir(directory, { recursive: true });
  return join(directory, `warm-start-${hash.digest('hex').slice(0, 16)}`);
}
