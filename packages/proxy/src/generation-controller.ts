import { randomUUID } from 'node:crypto';
import {
  type EngineReadiness,
  isRealVersion,
  type RolloutPauseResponse,
  type RolloutPauseState,
  type RolloutResumeResponse,
  type SglangSamplingParams,
  UNKNOWN_TOKEN_VERSION,
} from '@dressage/protocol';
import { sleep, Waiters } from '@dressage/protocol/internal';
import type { EngineClient, EngineGenerateResult, GenerateRequest } from './engine-client.js';
import { detailError } from './http-error.js';
import type { PromptIds } from './prompt-ids.js';

/** One engine request (chunk) of an agent call. */
export interface GenerationChunk {
  numOutputTokens: number;
  version: string;
  finishReason: string | null;
  preempted: boolean;
}

/** A whole agent call's output, stitched from its chunks. */
export interface GenerationOutput {
  text: string;
  ids: Int32Array;
  logprobs: Float32Array;
  /** Run-length versions of the output tokens: `[end, version]` pairs in token order. */
  versionRuns: Array<{ end: number; version: string }>;
  chunks: GenerationChunk[];
  /** The finish reason of the last chunk. */
  finishReason: string | null;
  /** True when logprob counts did not match id counts, or a chunk failed after an abort. */
  logprobsInvalid: boolean;
  /** Prompt logprobs of the first chunk (snapshot mode). */
  inputLogprobs: Float32Array | null;
  /** Routed-expert payloads, one per chunk that returned them, in chunk order. */
  routedExperts: RoutedExpertsPiece[];
}

/** The routed experts one engine call returned, placed in the call's token positions. */
export interface RoutedExpertsPiece {
  /** Base64 of little-endian int32 expert ids, `rows × (layers × top-k)`. */
  data: string;
  /** First token position covered (`routed_experts_start_len`). */
  start: number;
  /** Token positions the call saw: its input ids plus its output ids. */
  sequenceLength: number;
}

/** What a generation needs from its caller. */
export interface GenerationControllerRequest {
  sessionId: string;
  instanceId: string;
  turnId: string;
  promptIds: PromptIds;
  samplingParams: SglangSamplingParams;
  /** Output token budget over all chunks; null lets the engine decide. */
  maxNewTokens: number | null;
  /** `logprob_start_len` of the first chunk (0 asks for prompt logprobs). */
  firstLogprobStartLen: number;
  returnRoutedExperts: boolean;
  /** `X-Dressage-Expected-Version`: every chunk must report exactly this version. */
  expectedVersion: string | null;
  /** Non-partial sessions with steps: the epoch they are bound to. */
  boundEpoch: number | null;
  /** Re-encodes text when the engine sent no ids. */
  encodeText: (text: string) => Int32Array;
  signal?: AbortSignal;
}

interface ActiveGeneration {
  rid: string;
  sessionId: string;
  instanceId: string;
  /** A pause of this proxy asked the engine to abort it. */
  abortRequested: boolean;
  /** Its chunk came back preempted (set before `settled` resolves). */
  preemptedChunk: boolean;
  settled: Promise<void>;
}

/** Body of `POST /v1/rollout/pause`. */
export interface PauseRequest {
  session_id?: string | null;
  instance_id?: string | null;
  reason?: string;
  mode?: string;
  timeout_seconds?: number | null;
}

/**
 * Finish reasons of a request the engine stopped before its end: a preemption, whoever asked for it
 * (this proxy's pause, or slime pausing its engines around a weight update). An engine that fails
 * says so with an HTTP error or an error finish reason, never with one of these.
 */
const preemptedFinishReasons = new Set([
  'abort',
  'aborted',
  'preempt',
  'preempted',
  'cancel',
  'cancelled',
  'canceled',
]);

function cancelled(): Error {
  const error = new Error('The client went away');
  error.name = 'AbortError';
  return error;
}

/**
 * The generation controller (§1.5): global pause that preempts running engine requests by rid and
 * waits until they quiesce, resume with readiness, weight-version observation, and the chunk loop
 * that stitches a preempted call into one response in partial-rollout mode.
 */
export class GenerationController {
  paused = false;
  reason: string | null = null;
  /** The last real weight version observed (or set by resume). */
  currentVersion: string | null = null;
  rolloutEpoch = 0;
  shuttingDown = false;
  readonly partialRollout: boolean;
  readonly #engine: EngineClient;
  readonly #active = new Map<string, ActiveGeneration>();
  #suspended = 0;
  #preemptedChunks = 0;
  #unrequestedPreemptions = 0;
  readonly #resumed = new Waiters();
  readonly #readinessTimeoutMs: number;

  constructor(options: { engine: EngineClient; partialRollout: boolean; readinessTimeoutSeconds?: number }) {
    this.#engine = options.engine;
    this.partialRollout = options.partialRollout;
    this.#readinessTimeoutMs = (options.readinessTimeoutSeconds ?? 30) * 1000;
  }

  /** Number of engine requests now running. */
  get activeCount(): number {
    return this.#active.size;
  }

  /** `GET /v1/rollout/pause_state`. */
  state(): RolloutPauseState {
    return {
      paused: this.paused,
      reason: this.reason,
      version: this.currentVersion,
      rollout_epoch: this.rolloutEpoch,
      shutting_down: this.shuttingDown,
      partial_rollout: this.partialRollout,
      active_sglang_generations: this.#active.size,
      suspended_generations: this.#suspended,
      active_request_ids: [...this.#active.keys()],
      preempted_chunks: this.#preemptedChunks,
      unrequested_preemptions: this.#unrequestedPreemptions,
    };
  }

  /** Records a real weight version the engine reported. */
  observeVersion(version: string | null): void {
    if (isRealVersion(version)) this.currentVersion = version;
  }

  /** Resolves once the controller is not paused (immediately when running). */
  async waitWhilePaused(signal?: AbortSignal): Promise<void> {
    while (this.paused) {
      if (signal?.aborted) throw cancelled();
      await this.#resumed.wait({ signal });
    }
    if (signal?.aborted) throw cancelled();
  }

  /**
   * `POST /v1/rollout/pause`: sets the global pause, aborts matching running requests by rid and
   * waits until each returned its partial chunk (or the timeout passed).
   */
  async pause(request: PauseRequest): Promise<RolloutPauseResponse> {
    const mode = request.mode ?? 'preempt';
    if (mode !== 'preempt') {
      throw detailError(
        400,
        `mode: unsupported pause mode ${JSON.stringify(mode)}; only "preempt" is supported`,
      );
    }
    const reason = request.reason ?? 'weight_update';
    const wasPaused = this.paused;
    this.paused = true;
    this.reason = reason;
    const targets = [...this.#active.values()].filter(
      (generation) =>
        (!request.session_id || generation.sessionId === request.session_id) &&
        (!request.instance_id || generation.instanceId === request.instance_id),
    );
    for (const generation of targets) generation.abortRequested = true;
    const outcomes = await Promise.all(targets.map((generation) => this.#engine.abort(generation.rid)));
    const succeeded = outcomes.filter((outcome) => outcome.succeeded).map((outcome) => outcome.rid);
    const failed = outcomes.filter((outcome) => !outcome.succeeded);
    const settled = Promise.all(targets.map((generation) => generation.settled)).then(() => true);
    const timeoutMs =
      request.timeout_seconds === null || request.timeout_seconds === undefined
        ? null
        : request.timeout_seconds * 1000;
    let timer: NodeJS.Timeout | undefined;
    const quiesced =
      timeoutMs === null
        ? await settled
        : await Promise.race([
            settled,
            new Promise<boolean>((resolve) => {
              timer = setTimeout(() => resolve(false), timeoutMs);
            }),
          ]);
    if (timer) clearTimeout(timer);
    // As the reference reports it: the requests whose chunk came back preempted. One that reached
    // its own end before the abort landed is not among them.
    const preempted = targets.filter((generation) => generation.preemptedChunk);
    return {
      status: wasPaused ? 'already_paused' : 'paused',
      reason,
      mode,
      quiesced,
      preempted: preempted.length > 0,
      fallback: failed.length > 0 ? 'wait_natural_completion' : null,
      active_sglang_generations: this.#active.size,
      suspended_generations: this.#suspended,
      version: this.currentVersion,
      abort_attempted_request_ids: targets.map((generation) => generation.rid),
      abort_succeeded_request_ids: succeeded,
      abort_failed_request_ids: failed.map((outcome) => outcome.rid),
      abort_errors: Object.fromEntries(failed.map((outcome) => [outcome.rid, outcome.error])),
      preempted_request_ids: preempted.map((generation) => generation.rid),
    };
  }

  /**
   * `POST /v1/rollout/resume`: waits for a healthy worker, sets the version, bumps the epoch (only
   * when it was paused) and releases every waiting call.
   */
  async resume(request: { version?: string | null; reason?: string | null }): Promise<RolloutResumeResponse> {
    if (this.shuttingDown) {
      throw detailError(503, { status: 'shutting_down', paused: this.paused, shutting_down: true });
    }
    const wasPaused = this.paused;
    let readiness: EngineReadiness | undefined;
    if (wasPaused) {
      readiness = await this.#waitForReadiness();
      if (!readiness.ready) {
        throw detailError(503, {
          status: 'backend_not_ready',
          readiness,
          paused: true,
          rollout_epoch: this.rolloutEpoch,
          version: this.currentVersion,
        });
      }
    }
    if (request.version !== undefined && request.version !== null) this.currentVersion = request.version;
    if (wasPaused) this.rolloutEpoch += 1;
    this.paused = false;
    this.reason = request.reason ?? null;
    this.#resumed.wakeAll();
    const body: RolloutResumeResponse = {
      status: wasPaused ? 'resumed' : 'already_running',
      reason: this.reason,
      version: this.currentVersion,
      rollout_epoch: this.rolloutEpoch,
      shutting_down: this.shuttingDown,
      active_sglang_generations: this.#active.size,
      suspended_generations: this.#suspended,
    };
    if (readiness) body.readiness = readiness;
    return body;
  }

  /** Marks shutdown and releases waiters so they fail fast. */
  shutdown(): void {
    this.shuttingDown = true;
    this.#resumed.wakeAll();
  }

  async #waitForReadiness(): Promise<EngineReadiness> {
    const deadline = Date.now() + this.#readinessTimeoutMs;
    for (;;) {
      const workers = await this.#engine.healthyHttpWorkers();
      if (workers.length > 0) {
        return {
          ready: true,
          healthy_http_workers: workers.length,
          worker_urls: workers.map((worker) => worker.url),
        };
      }
      if (Date.now() >= deadline) return { ready: false, healthy_http_workers: 0, worker_urls: [] };
      await sleep(Math.min(1000, Math.max(1, deadline - Date.now())));
    }
  }

  /**
   * Runs one agent call: one engine request, or several when a pause preempts it in partial mode
   * (each continuation sends prompt + tokens so far). Tokens keep the version of their chunk.
   *
   * @throws ProxyHttpError 502 for preemption without partial mode (`generation_preempted`, also
   *   when the engine aborted the request without a pause of this proxy), epoch changes and
   *   version pins; 500 when the engine answers an HTTP error.
   */
  async generate(request: GenerationControllerRequest): Promise<GenerationOutput> {
    const pieces: EngineGenerateResult[] = [];
    const chunks: GenerationChunk[] = [];
    const versionRuns: Array<{ end: number; version: string }> = [];
    let generated = 0;
    let text = '';
    let logprobsInvalid = false;
    let inputLogprobs: Float32Array | null = null;
    const routedExperts: RoutedExpertsPiece[] = [];
    let wasSuspended = false;
    const context: ErrorContext = { session_id: request.sessionId, instance_id: request.instanceId };
    try {
      for (;;) {
        if (this.paused && chunks.length > 0 && !wasSuspended) {
          this.#suspended += 1;
          wasSuspended = true;
        }
        // Not paused and not cancelled (nearly every call): no await, so no extra turn of the loop.
        if (this.paused || request.signal?.aborted) await this.waitWhilePaused(request.signal);
        if (wasSuspended) {
          this.#suspended -= 1;
          wasSuspended = false;
        }
        this.#checkContinuable(request, context);
        const remaining = request.maxNewTokens === null ? null : request.maxNewTokens - generated;
        if (remaining !== null && remaining <= 0) break;
        const inputIds =
          generated === 0
            ? request.promptIds
            : concatInt32([request.promptIds.toInt32Array(), ...pieces.map((piece) => piece.outputIds!)]);
        const samplingParams =
          remaining === null
            ? request.samplingParams
            : { ...request.samplingParams, max_new_tokens: remaining };
        // randomUUID draws from a cached entropy pool: cheaper than randomBytes on the hot path.
        const rid = `dressage-${request.sessionId}-${request.turnId}-${randomUUID().replaceAll('-', '')}`;
        const { generation, settle } = this.#register(rid, request);
        let result: EngineGenerateResult;
        try {
          result = await this.#engine.generate(
            engineRequestOf(request, { inputIds, samplingParams, rid, first: chunks.length === 0 }),
            { routingKey: request.sessionId, signal: request.signal },
          );
        } catch (error) {
          if (!generation.abortRequested || request.signal?.aborted) throw error;
          // The abort broke the call itself: resume from the previous prefix, logprobs unknown.
          result = abortedChunkResult();
          logprobsInvalid = true;
        } finally {
          this.#active.delete(rid);
          // Everything below runs synchronously, so the chunk is appended before a pause resumes.
          settle();
        }
        if (normalizeChunk(result, request)) logprobsInvalid = true;
        const outputIds = result.outputIds as Int32Array;
        const count = outputIds.length;
        this.observeVersion(result.weightVersion);
        const version = result.weightVersion ?? UNKNOWN_TOKEN_VERSION;
        checkExpectedVersion(result, request, context);
        if (chunks.length === 0) inputLogprobs = result.inputLogprobs;
        if (result.routedExperts) {
          routedExperts.push({
            data: result.routedExperts,
            start: result.routedExpertsStart,
            sequenceLength: inputIds.length + count,
          });
        }
        // The engine's finish reason decides, as in the reference: a chunk is preempted when the
        // engine ended it early, whoever asked (slime pauses its engines itself around a weight
        // update, and those requests come back as `abort` too; the ones this proxy did not ask for
        // are counted). A request that reached its own end while this proxy's abort was on its way
        // comes back `stop` or `length` and is finished: continuing it would append a second
        // answer after the end-of-turn token.
        const preempted = preemptedFinishReasons.has(result.finishReason ?? '');
        generation.preemptedChunk = preempted;
        if (preempted) {
          this.#preemptedChunks += 1;
          if (!generation.abortRequested) this.#unrequestedPreemptions += 1;
        }
        pieces.push(result);
        text += result.text;
        generated += count;
        if (count > 0) extendVersionRuns(versionRuns, generated, version);
        chunks.push({ numOutputTokens: count, version, finishReason: result.finishReason, preempted });
        if (!preempted) break;
        if (!this.partialRollout) {
          throw detailError(502, {
            error: 'generation_preempted',
            message:
              'The generation was preempted by a rollout pause and this proxy does not continue partial rollouts.',
            ...context,
          });
        }
      }
    } finally {
      if (wasSuspended) this.#suspended -= 1;
    }
    const ids = concatInt32(pieces.map((piece) => piece.outputIds!));
    return {
      text,
      ids,
      logprobs: concatLogprobs(pieces, ids.length),
      versionRuns,
      chunks,
      // A preempted last chunk means the budget ran out across continuations.
      finishReason: chunks.at(-1)?.preempted ? 'length' : (chunks.at(-1)?.finishReason ?? null),
      logprobsInvalid,
      inputLogprobs,
      routedExperts,
    };
  }

  // A request may go on: the proxy is not shutting down and, for a non-partial trajectory, no
  // resume moved the rollout epoch since it started.
  #checkContinuable(request: GenerationControllerRequest, context: ErrorContext): void {
    if (this.shuttingDown) throw detailError(503, { error: 'proxy_shutting_down' });
    if (request.boundEpoch !== null && request.boundEpoch !== this.rolloutEpoch) {
      throw detailError(502, {
        error: 'trajectory_version_changed',
        message: 'The rollout epoch changed (a resume happened) during this non-partial trajectory.',
        session_epoch: request.boundEpoch,
        current_epoch: this.rolloutEpoch,
        ...context,
      });
    }
  }

  // One engine request in flight, findable by a pause; `settle` tells the pause it has come back.
  #register(
    rid: string,
    request: GenerationControllerRequest,
  ): { generation: ActiveGeneration; settle: () => void } {
    let settle!: () => void;
    const generation: ActiveGeneration = {
      rid,
      sessionId: request.sessionId,
      instanceId: request.instanceId,
      abortRequested: false,
      preemptedChunk: false,
      settled: new Promise<void>((resolve) => {
        settle = resolve;
      }),
    };
    this.#active.set(rid, generation);
    return { generation, settle };
  }
}

/** The ids every error of a generation names. */
interface ErrorContext {
  session_id: string;
  instance_id: string;
}

// What a chunk whose engine call an abort broke contributes: nothing, its logprobs unknown.
function abortedChunkResult(): EngineGenerateResult {
  return {
    text: '',
    outputIds: new Int32Array(0),
    outputLogprobs: new Float32Array(0),
    outputLogprobsInvalid: true,
    inputLogprobs: null,
    weightVersion: null,
    finishReason: 'abort',
    finishMessage: null,
    routedExperts: null,
    routedExpertsStart: 0,
  };
}

// Gives a chunk output ids (its text encoded when the engine sent none) and exactly one logprob per
// id; true when its logprobs cannot be trusted (missing, null or NaN ones are recorded as 0 and
// flagged, never passed off as a real 0).
function normalizeChunk(result: EngineGenerateResult, request: GenerationControllerRequest): boolean {
  let invalid = result.outputLogprobsInvalid;
  if (result.outputIds === null) {
    result.outputIds = request.encodeText(result.text);
    invalid = true;
  }
  const count = result.outputIds.length;
  if (result.outputLogprobs.length !== count) {
    const normalized = new Float32Array(count);
    normalized.set(result.outputLogprobs.subarray(0, count));
    result.outputLogprobs = normalized;
    invalid = true;
  }
  return invalid;
}

// X-Dressage-Expected-Version pins the weights: a chunk from other weights, or of unknown ones, fails.
function checkExpectedVersion(
  result: EngineGenerateResult,
  request: GenerationControllerRequest,
  context: ErrorContext,
): void {
  if (request.expectedVersion === null) return;
  if (!isRealVersion(result.weightVersion)) {
    throw detailError(502, {
      error: 'weight_version_unavailable',
      message: 'X-Dressage-Expected-Version is set but the engine reported no weight version.',
      expected: request.expectedVersion,
      ...context,
    });
  }
  if (result.weightVersion !== request.expectedVersion) {
    throw detailError(502, {
      error: 'weight_version_mismatch',
      expected: request.expectedVersion,
      observed: result.weightVersion,
      ...context,
    });
  }
}

// The `/generate` request of one chunk: logprobs of the output (and of the prompt from
// `firstLogprobStartLen` for the first chunk), routed experts when asked.
function engineRequestOf(
  request: GenerationControllerRequest,
  chunk: {
    inputIds: Int32Array | PromptIds;
    samplingParams: GenerateRequest['sampling_params'];
    rid: string;
    first: boolean;
  },
): GenerateRequest {
  return {
    input_ids: chunk.inputIds,
    sampling_params: chunk.samplingParams,
    return_logprob: true,
    logprob_start_len: chunk.first ? request.firstLogprobStartLen : -1,
    return_text_in_logprobs: true,
    rid: chunk.rid,
    ...(request.returnRoutedExperts ? { return_routed_experts: true } : {}),
  };
}

// Tokens up to `end` carry `version`: the last run grows, or a new one starts.
function extendVersionRuns(
  runs: Array<{ end: number; version: string }>,
  end: number,
  version: string,
): void {
  const last = runs.at(-1);
  if (last && last.version === version) last.end = end;
  else runs.push({ end, version });
}

// The chunks' logprobs end to end.
function concatLogprobs(pieces: readonly EngineGenerateResult[], length: number): Float32Array {
  const logprobs = new Float32Array(length);
  let offset = 0;
  for (const piece of pieces) {
    logprobs.set(piece.outputLogprobs, offset);
    offset += piece.outputLogprobs.length;
  }
  return logprobs;
}

/** Concatenates int32 arrays into one. */
export function concatInt32(parts: readonly Int32Array[]): Int32Array {
  if (parts.length === 1) return parts[0]!;
  let length = 0;
  for (const part of parts) length += part.length;
  const out = new Int32Array(length);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}
