import { DressageError } from '@dressage/protocol';
import { Waiters } from '@dressage/protocol/internal';
import * as tf from '@tensorflow/tfjs';
import type { DecodeBatch } from './decode-batch.js';
import { type CausalLanguageModel, type NamedWeights, scaleLogits } from './model.js';
import { hashSeed, SeededRandom } from './random.js';
import { logprobTemperature, type SamplingSettings, sampleClass } from './sampling.js';

/** Sampling and stopping parameters of one generation (SGLang's `sampling_params`, camel-cased). */
export interface GenerationSampling extends SamplingSettings {
  /** Output tokens at most. */
  maxNewTokens: number;
  /** Ids that end the generation (kept as the last output id). */
  stopTokenIds: readonly number[];
  /** Strings that end the generation once the output text contains them. */
  stop: readonly string[];
  /** When true, the engine's end-of-sequence ids do not stop the generation. */
  ignoreEos: boolean;
  /** Seed of this request's sampler; null derives one from the engine seed and the request id. */
  seed: number | null;
}

/** One generation request. */
export interface GenerationRequest {
  /** Request id, unique among running requests. */
  rid: string;
  /** Prompt token ids (real tokenizer ids). */
  inputIds: ArrayLike<number>;
  sampling: GenerationSampling;
  /** First prompt position whose logprob to report; -1 reports none. */
  logprobStartLength: number;
  /** Called after each sampled token (for streaming); must not throw. */
  onToken?: (tokenId: number, logprob: number) => void;
}

/** Why a generation ended, in SGLang's shape. */
export type EngineFinishReason =
  | { type: 'stop'; matched: number | string }
  | { type: 'length'; length: number }
  | { type: 'abort'; message: string }
  /** The engine failed the request: served as an HTTP error, never as `abort` (which means preempted). */
  | { type: 'error'; message: string };

/** What one generation produced. */
export interface GenerationResult {
  rid: string;
  outputIds: Int32Array;
  /** Logprob of each output id at sampling time (under the temperature-scaled distribution). */
  outputLogprobs: Float32Array;
  /**
   * Logprobs of prompt positions from `logprobStartLength` on (NaN where there is none: position 0
   * and ids outside the vocabulary), or null when not requested.
   */
  inputLogprobs: Float32Array | null;
  finishReason: EngineFinishReason;
  /** The weight version the output was produced with. */
  weightVersion: string;
  promptTokens: number;
  /** Seconds from submission to the end. */
  latencySeconds: number;
}

/** New weights and the version they are served under. */
export interface WeightUpdate {
  weights: NamedWeights;
  weightVersion: string;
}

/** How {@link InferenceEngine.pause} treats running requests (SGLang's `/pause_generation` modes). */
export type PauseMode = 'abort' | 'in_place' | 'retract';

/** Options of {@link InferenceEngine}. */
export interface InferenceEngineOptions {
  model: CausalLanguageModel;
  /** Default `default`, as SGLang names an unversioned model. */
  weightVersion?: string;
  /** Most sequences decoded together. Default 32. */
  maxBatchSize?: number;
  /** Base seed of requests that bring none. Default 0. */
  seed?: number;
  /** Ids that end every generation unless `ignoreEos`. */
  eosTokenIds?: readonly number[];
  /** Decodes ids to text; needed for stop strings. */
  decodeText?: (ids: readonly number[]) => string;
}

/** Counters of the engine's work since it started. */
export interface EngineStatistics {
  prefills: number;
  decodeSteps: number;
  decodedTokens: number;
  /** The most rows one decode step carried. */
  largestBatch: number;
  completedRequests: number;
  abortedRequests: number;
  failedRequests: number;
}

interface RequestState {
  request: GenerationRequest;
  tokens: number[];
  outputIds: number[];
  outputLogprobs: number[];
  inputLogprobs: Float32Array | null;
  random: SeededRandom;
  startedAt: number;
  resolve: (result: GenerationResult) => void;
}

const stopWindowTokens = 8;

/**
 * A prompt longer than the model can read (at least its context length, which leaves no room for a
 * token): HTTP 413, as the proxy answers a context overflow, with the lengths in `details`.
 */
export class ContextOverflowError extends DressageError {
  constructor(message: string, details: Record<string, unknown>) {
    super({ code: 'out_of_range', message, details });
    this.name = 'ContextOverflowError';
  }

  override get httpStatus(): number {
    return 413;
  }
}

/**
 * The embedded inference engine: continuous batching over a {@link CausalLanguageModel} with a
 * stacked key/value cache (see `DecodeBatch`). Requests join the running batch between decode steps; every step is
 * synchronous, so aborts, pauses and weight swaps always land on a token boundary.
 *
 * @example
 * ```ts
 * const engine = new InferenceEngine({ model, eosTokenIds: [151645] });
 * const result = await engine.generate({ rid: 'r1', inputIds, sampling, logprobStartLength: -1 });
 * ```
 */
export class InferenceEngine {
  readonly model: CausalLanguageModel;
  readonly maxBatchSize: number;
  readonly statistics: EngineStatistics = {
    prefills: 0,
    decodeSteps: 0,
    decodedTokens: 0,
    largestBatch: 0,
    completedRequests: 0,
    abortedRequests: 0,
    failedRequests: 0,
  };
  #weightVersion: string;
  readonly #seed: number;
  readonly #eosTokenIds: ReadonlySet<number>;
  readonly #decodeText: ((ids: readonly number[]) => string) | undefined;
  readonly #waiting: RequestState[] = [];
  readonly #running: RequestState[] = [];
  #paused: PauseMode | null = null;
  #updatePending = false;
  #updateChain: Promise<unknown> = Promise.resolve();
  #loopActive = false;
  readonly #idle = new Waiters();
  readonly #drained = new Waiters();
  #closed = false;
  readonly #batch: DecodeBatch<RequestState>;

  constructor(options: InferenceEngineOptions) {
    this.model = options.model;
    this.#weightVersion = options.weightVersion ?? 'default';
    this.maxBatchSize = options.maxBatchSize ?? 32;
    this.#seed = options.seed ?? 0;
    this.#eosTokenIds = new Set(options.eosTokenIds ?? []);
    this.#decodeText = options.decodeText;
    this.#batch = options.model.createDecodeBatch<RequestState>();
    if (!Number.isInteger(this.maxBatchSize) || this.maxBatchSize < 1) {
      throw new DressageError({
        code: 'invalid_argument',
        message: 'maxBatchSize must be a positive integer',
      });
    }
  }

  /** The version of the weights now served. */
  get weightVersion(): string {
    return this.#weightVersion;
  }

  /** The pause mode in effect, or null while generating. */
  get paused(): PauseMode | null {
    return this.#paused;
  }

  /** Requests being decoded. */
  get runningCount(): number {
    return this.#running.length;
  }

  /** Requests queued (not admitted yet, or retracted by a pause). */
  get waitingCount(): number {
    return this.#waiting.length;
  }

  /** Ids of every request the engine holds. */
  requestIds(): string[] {
    return [...this.#running, ...this.#waiting].map((state) => state.request.rid);
  }

  /**
   * Queues a generation and resolves when it ends (finished, or aborted with its partial output).
   * @throws DressageError `invalid_argument` for an empty or too long prompt, bad sampling values or
   * a request id already in use; `unavailable` after {@link InferenceEngine.close}.
   */
  generate(request: GenerationRequest): Promise<GenerationResult> {
    if (this.#closed) throw new DressageError({ code: 'unavailable', message: 'The engine is closed' });
    this.#validate(request);
    return new Promise<GenerationResult>((resolve) => {
      const seed = request.sampling.seed ?? hashSeed(this.#seed, request.rid);
      this.#waiting.push({
        request,
        tokens: Array.from(request.inputIds),
        outputIds: [],
        outputLogprobs: [],
        inputLogprobs: null,
        random: new SeededRandom(seed),
        startedAt: performance.now(),
        resolve,
      });
      this.#kick();
    });
  }

  /**
   * Ends one request at the current token boundary; its `generate` resolves with the output so far
   * and `finish_reason.type = "abort"`. Returns false when no such request is held.
   */
  abort(rid: string, message = 'Abort request'): boolean {
    const state = [...this.#running, ...this.#waiting].find((candidate) => candidate.request.rid === rid);
    if (state === undefined) return false;
    this.#finish(state, { type: 'abort', message });
    return true;
  }

  /** Aborts every held request; returns how many. */
  abortAll(message = 'Abort all requests'): number {
    const states = [...this.#running, ...this.#waiting];
    for (const state of states) this.#finish(state, { type: 'abort', message });
    return states.length;
  }

  /**
   * Pauses generation. `abort` (SGLang's default) aborts every held request; `in_place` keeps
   * running requests and their caches; `retract` keeps them but frees their caches (they are
   * re-read on continue). New requests queue until {@link InferenceEngine.resume}.
   */
  pause(mode: PauseMode = 'abort'): void {
    this.#paused = mode;
    if (mode === 'abort') this.abortAll('Abort by pause_generation');
    else if (mode === 'retract') this.#retractRunning();
    this.#notifyIdle();
  }

  /** Resumes after {@link InferenceEngine.pause}. */
  resume(): void {
    this.#paused = null;
    this.#kick();
  }

  /**
   * Serves new weights under a new version. Unless generation is paused, running requests finish
   * on the old weights first (new ones wait), so each response comes from one version; paused
   * requests lose their caches and continue on the new weights.
   *
   * @returns how many held requests continue under the new weights.
   * @throws DressageError `invalid_argument` when the weights do not fit the model.
   */
  updateWeights(
    source: WeightUpdate | (() => Promise<WeightUpdate>),
    options: { abortAllRequests?: boolean } = {},
  ): Promise<{ pausedRequests: number }> {
    const run = async () => {
      const update = typeof source === 'function' ? await source() : source;
      if (options.abortAllRequests) this.abortAll('Abort by update_weights');
      this.#updatePending = true;
      try {
        if (this.#paused === null) await this.#waitForNoRunning();
        const pausedRequests =
          this.#running.length + this.#waiting.filter((state) => state.outputIds.length > 0).length;
        // Checks every weight before changing any: a failed update leaves requests untouched.
        this.model.setWeights(update.weights);
        this.#weightVersion = update.weightVersion;
        // Caches written with the old weights must not mix with the new ones.
        this.#retractRunning();
        return { pausedRequests };
      } finally {
        this.#updatePending = false;
        this.#kick();
      }
    };
    const result = this.#updateChain.then(run, run);
    this.#updateChain = result.catch(() => undefined);
    return result;
  }

  /** True (caches live only as long as their requests) when no request is held. */
  flushCache(): boolean {
    return this.#running.length === 0 && this.#waiting.length === 0;
  }

  /** Resolves when no request is held. */
  idle(): Promise<void> {
    if (this.#running.length === 0 && this.#waiting.length === 0) return Promise.resolve();
    return this.#idle.wait().then(() => undefined);
  }

  /** Aborts everything and refuses new requests. The model stays the caller's. */
  close(): void {
    this.#closed = true;
    this.abortAll('Engine shutting down');
  }

  #validate(request: GenerationRequest): void {
    const invalid = (message: string, details: Record<string, unknown> = {}) =>
      new DressageError({ code: 'invalid_argument', message, details: { rid: request.rid, ...details } });
    const { contextLength } = this.model.config;
    if (request.inputIds.length === 0) throw invalid('input_ids must not be empty');
    if (request.inputIds.length >= contextLength) {
      throw new ContextOverflowError(
        `The input (${request.inputIds.length} tokens) is longer than the model's context length (${contextLength} tokens) allows`,
        { rid: request.rid, prompt_tokens: request.inputIds.length, context_length: contextLength },
      );
    }
    for (let index = 0; index < request.inputIds.length; index++) {
      const id = request.inputIds[index]!;
      if (!Number.isInteger(id) || id < 0) throw invalid(`input_ids[${index}] is not a token id: ${id}`);
    }
    if ([...this.#running, ...this.#waiting].some((state) => state.request.rid === request.rid)) {
      throw invalid(`Request id ${request.rid} is already running`);
    }
    const { sampling } = request;
    if (!(sampling.temperature >= 0)) throw invalid('temperature must be >= 0');
    if (!(sampling.topP > 0 && sampling.topP <= 1)) throw invalid('top_p must be in (0, 1]');
    if (!Number.isInteger(sampling.topK) || (sampling.topK < 1 && sampling.topK !== -1)) {
      throw invalid('top_k must be -1 (disabled) or at least 1');
    }
    if (!Number.isInteger(sampling.maxNewTokens) || sampling.maxNewTokens < 0) {
      throw invalid('max_new_tokens must be a non-negative integer');
    }
    if (!Number.isInteger(request.logprobStartLength) || request.logprobStartLength < -1) {
      throw invalid('logprob_start_len must be -1 or a prompt position');
    }
    if (request.logprobStartLength >= request.inputIds.length) {
      throw invalid(
        `logprob_start_len (${request.logprobStartLength}) must be below the prompt length (${request.inputIds.length})`,
      );
    }
    if (sampling.stop.length > 0 && this.#decodeText === undefined) {
      throw invalid('Stop strings need an engine with a tokenizer');
    }
  }

  #kick(): void {
    if (this.#loopActive || this.#closed) return;
    this.#loopActive = true;
    setImmediate(() => {
      void this.#loop();
    });
  }

  async #loop(): Promise<void> {
    try {
      while (!this.#closed) {
        if (this.#paused === null && !this.#updatePending) this.#admit();
        if (this.#paused !== null || this.#running.length === 0) break;
        this.#decodeStep();
        // Yield between steps so HTTP requests (new generations, aborts, pauses) are served.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } catch (error) {
      this.#failAll(error);
    } finally {
      this.#loopActive = false;
    }
    this.#notifyIdle();
  }

  #admit(): void {
    while (this.#waiting.length > 0 && this.#running.length < this.maxBatchSize) {
      const state = this.#waiting.shift()!;
      this.#running.push(state);
      try {
        this.#prefill(state);
      } catch (error) {
        this.#fail(state, error);
      }
    }
  }

  #prefill(state: RequestState): void {
    const { model } = this;
    const { request } = state;
    this.statistics.prefills += 1;
    if (state.outputIds.length > 0) {
      // A retracted request: re-read everything but the last sampled token, which the next step reads.
      const { cache, logits } = model.prefill(model.vocabulary.slotsOf(state.tokens.slice(0, -1)));
      logits.dispose();
      this.#batch.add(state, cache);
      return;
    }
    const wantInput = request.logprobStartLength >= 0;
    const { cache, logits } = model.prefill(model.vocabulary.slotsOf(state.tokens), {
      allPositions: wantInput,
    });
    this.#batch.add(state, cache);
    const temperature = logprobTemperature(request.sampling);
    const logprobs = tf.tidy(
      () => tf.logSoftmax(scaleLogits(logits, temperature)).dataSync() as Float32Array,
    );
    logits.dispose();
    const outputs = model.vocabulary.outputCount;
    const promptLength = state.tokens.length;
    if (wantInput) {
      const start = request.logprobStartLength;
      const values = new Float32Array(promptLength - start).fill(Number.NaN);
      for (let position = Math.max(start, 1); position < promptLength; position++) {
        const target = model.vocabulary.outputClassOf(state.tokens[position]!);
        if (target >= 0) values[position - start] = logprobs[(position - 1) * outputs + target]!;
      }
      state.inputLogprobs = values;
    }
    if (request.sampling.maxNewTokens === 0) {
      this.#finish(state, { type: 'length', length: 0 });
      return;
    }
    const lastRow = wantInput ? promptLength - 1 : 0;
    this.#accept(state, logprobs, lastRow * outputs);
  }

  #decodeStep(): void {
    // Row order of the batch: every running request has a row once prefilled.
    const states = this.#batch.owners;
    const slots = states.map((state) => this.model.vocabulary.slotOf(state.tokens[state.tokens.length - 1]!));
    const temperatures = states.map((state) => logprobTemperature(state.request.sampling));
    const logprobs = tf.tidy(() => {
      const logits = this.#batch.step(slots);
      const scale = temperatures.every((value) => value === 1)
        ? 1
        : tf.tensor2d(temperatures, [temperatures.length, 1]);
      return tf.logSoftmax(scaleLogits(logits, scale)).dataSync() as Float32Array;
    });
    this.statistics.decodeSteps += 1;
    this.statistics.decodedTokens += states.length;
    this.statistics.largestBatch = Math.max(this.statistics.largestBatch, states.length);
    const outputs = this.model.vocabulary.outputCount;
    states.forEach((state, row) => {
      this.#accept(state, logprobs, row * outputs);
    });
  }

  /** Samples the next token of `state` from the logprob row at `offset`, then checks the stop rules. */
  #accept(state: RequestState, logprobs: Float32Array, offset: number): void {
    const { sampling } = state.request;
    const outputs = this.model.vocabulary.outputCount;
    const chosen = sampleClass(logprobs, offset, outputs, sampling, state.random);
    const tokenId = this.model.vocabulary.tokenIdOfOutputClass(chosen);
    state.tokens.push(tokenId);
    state.outputIds.push(tokenId);
    state.outputLogprobs.push(logprobs[offset + chosen]!);
    try {
      state.request.onToken?.(tokenId, logprobs[offset + chosen]!);
    } catch {
      // A failing listener (a closed stream) must not stop the batch; the request ends on its own.
    }
    if ((!sampling.ignoreEos && this.#eosTokenIds.has(tokenId)) || sampling.stopTokenIds.includes(tokenId)) {
      this.#finish(state, { type: 'stop', matched: tokenId });
      return;
    }
    if (sampling.stop.length > 0) {
      const longest = Math.max(...sampling.stop.map((text) => text.length));
      const tail = this.#decodeText!(state.outputIds.slice(-(longest + stopWindowTokens)));
      const matched = sampling.stop.find((text) => text !== '' && tail.includes(text));
      if (matched !== undefined) {
        this.#finish(state, { type: 'stop', matched });
        return;
      }
    }
    if (state.outputIds.length >= sampling.maxNewTokens) {
      this.#finish(state, { type: 'length', length: state.outputIds.length });
      return;
    }
    if (state.tokens.length >= this.model.config.contextLength) {
      this.#finish(state, { type: 'length', length: state.outputIds.length });
    }
  }

  #finish(state: RequestState, finishReason: EngineFinishReason): void {
    removeFrom(this.#running, state);
    removeFrom(this.#waiting, state);
    this.#batch.remove(state);
    if (finishReason.type === 'abort') this.statistics.abortedRequests += 1;
    else if (finishReason.type === 'error') this.statistics.failedRequests += 1;
    else this.statistics.completedRequests += 1;
    state.resolve({
      rid: state.request.rid,
      outputIds: Int32Array.from(state.outputIds),
      outputLogprobs: Float32Array.from(state.outputLogprobs),
      inputLogprobs: state.inputLogprobs,
      finishReason,
      weightVersion: this.#weightVersion,
      promptTokens: state.request.inputIds.length,
      latencySeconds: (performance.now() - state.startedAt) / 1000,
    });
    this.#notifyIdle();
  }

  #fail(state: RequestState, error: unknown): void {
    const message = error instanceof Error ? error.message : String(error);
    // Not `abort`: a client (the proxy) takes an aborted request for a preempted one and continues it.
    this.#finish(state, { type: 'error', message: `Internal error: ${message}` });
  }

  #failAll(error: unknown): void {
    for (const state of [...this.#running, ...this.#waiting]) this.#fail(state, error);
  }

  #retractRunning(): void {
    this.#batch.clear();
    this.#waiting.unshift(...this.#running.splice(0));
  }

  #waitForNoRunning(): Promise<void> {
    const drained = this.#drained.wait().then(() => undefined);
    this.#notifyIdle();
    return drained;
  }

  #notifyIdle(): void {
    if (this.#running.length === 0 || this.#paused !== null) {
      this.#drained.wakeAll();
    }
    if (this.#running.length === 0 && this.#waiting.length === 0) {
      this.#idle.wakeAll();
    }
  }
}

function removeFrom(list: RequestState[], state: RequestState): void {
  const index = list.indexOf(state);
  if (index >= 0) list.splice(index, 1);
}

/** Defaults of SGLang's sampling parameters. */
export const defaultSampling: Readonly<GenerationSampling> = {
  temperature: 1,
  topP: 1,
  topK: -1,
  maxNewTokens: 128,
  stopTokenIds: [],
  stop: [],
  ignoreEos: false,
  seed: null,
};
