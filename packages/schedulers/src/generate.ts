import { DressageError, type Sample, type SglangSamplingParams } from '@dressage/protocol';

/**
 * Sampling parameters handed to every generate call unchanged: SGLang's (temperature, top_p,
 * max_new_tokens, ...); keys it does not name pass through.
 */
export type SamplingParams = SglangSamplingParams;

/** Which scheduler runs a generate call. */
export type RolloutMode = 'sync' | 'fully-async' | 'partial-async';

/** What a generate call knows about its surroundings. */
export interface GenerateContext {
  /** Aborted when the scheduler cancels the group (shutdown, a failed sibling, a drained worker). */
  signal: AbortSignal;
  /** The rollout the group was submitted for. */
  rolloutId: number;
  /** 0 on the first try; the group's `metadata.dressage_retry_count` otherwise. */
  attempt: number;
  mode: RolloutMode;
}

/**
 * What a generate call may return: one sample, a fan-out of samples (multi-segment expansion), or
 * lists of those; everything is flattened. Nothing (`null`, `undefined`, `[]`) fails the group.
 */
export type GenerateResult = Sample | readonly Sample[] | readonly (readonly Sample[])[] | null | undefined;

/**
 * Rolls out one sample. It may fill the given sample in place and return it, or return new samples.
 * It should stop promptly when `context.signal` aborts; a result arriving after that is ignored.
 *
 * @example
 * ```ts
 * const generate: GenerateFunction = async (sample, samplingParams, { signal }) => {
 *   const reply = await agent.run(sample.prompt, { signal, ...samplingParams });
 *   return { ...sample, response: reply.text, status: 'completed' };
 * };
 * ```
 */
export type GenerateFunction = (
  sample: Sample,
  samplingParams: SamplingParams,
  context: GenerateContext,
) => Promise<GenerateResult> | GenerateResult;

/**
 * Forgets a proxy session whose trajectory failed, so its records do not linger (the proxy client's
 * `discardSession`).
 */
export interface SessionDiscarder {
  discardSession(sessionId: string): Promise<unknown>;
}

/** Ids a failed sample's placeholder may fall back to. */
export interface MarkAbortedNoGradOptions {
  sessionId?: string | null;
  instanceId?: string | null;
}

/** Turns a sample whose retries are exhausted into a no-gradient placeholder. */
export type MarkAbortedNoGrad = (sample: Sample, options: MarkAbortedNoGradOptions) => Sample;

/** Where schedulers report what a user should see but that does not stop the run. */
export interface SchedulerLogger {
  warn(message: string, details?: Record<string, unknown>): void;
}

/** Logs to the console. */
export const consoleLogger: SchedulerLogger = {
  warn(message, details) {
    if (details === undefined) console.warn(`[dressage/schedulers] ${message}`);
    else console.warn(`[dressage/schedulers] ${message}`, details);
  },
};

/**
 * A generate function that honours each sample's `generate_function_path` (set by the data source
 * from the prompt record): samples naming a path use `byPath[path]`, the others `fallback`. A path
 * with no function fails the sample with `not_found`, listing the known paths.
 */
export function routeGenerateByPath(
  byPath: Readonly<Record<string, GenerateFunction>>,
  fallback: GenerateFunction,
): GenerateFunction {
  return (sample, samplingParams, context) => {
    const path = sample.generate_function_path;
    if (path === null || path === '') return fallback(sample, samplingParams, context);
    const generate = byPath[path];
    if (generate === undefined) {
      throw new DressageError({
        code: 'not_found',
        message: `no generate function registered for generate_function_path "${path}" (known: ${Object.keys(byPath).join(', ') || 'none'})`,
        details: { path, known: Object.keys(byPath) },
      });
    }
    return generate(sample, samplingParams, context);
  };
}
