import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  DressageError,
  type GetInfoResponse,
  type HealthResponse,
  HealthStatus,
  type LoadCheckpointRequest,
  type LoadCheckpointResponse,
  type PackedTrainBatch,
  type SaveCheckpointRequest,
  type SaveCheckpointResponse,
  type TrainBatchHeader,
  type TrainResponse,
  type UpdateWeightsRequest,
  type UpdateWeightsResponse,
} from '@dressage/protocol';
import { checkTrainBatchValues } from '@dressage/protocol/internal';
import {
  checkGradientSpikeFactor,
  GradientSpikeClip,
  type PolicyLossOptions,
  policyLossOptionsFromLossConfig,
  resolvePolicyLossOptions,
  type TrainerImplementation,
} from '@dressage/trainer-bridge';
import { effectiveGlobalBatchSize } from '@dressage/trainer-bridge/internal';
import {
  clipGradientsByGlobalNorm,
  policyLossGradients,
  reducerWeights,
} from '@dressage/trainer-bridge/tfjs';
import * as tf from '@tensorflow/tfjs';
import { loadWeightsFor, saveCheckpoint } from '../checkpoint.js';
import type { InferenceEngine } from '../engine.js';
import { CausalLanguageModel } from '../model.js';
import { logprobTemperature } from '../sampling.js';
import {
  buildMicroBatch,
  type MicroBatch,
  planMicroBatches,
  sampleSpans,
  trainableTokenCount,
} from './batch-layout.js';
import { ReferencePolicy } from './reference-policy.js';
import {
  type AdjustableAdam,
  createAdam,
  packWeights,
  readOptimizerMoments,
  readTrainerState,
  restoreAdam,
  unpackWeights,
  writeTrainerState,
} from './trainer-state.js';

/** The loss a Train call optimizes (`LossConfig.loss_type`). */
export type EmbeddedLossType = 'policy_loss' | 'sft_loss';

/** Options of {@link EmbeddedTrainer}. */
export interface EmbeddedTrainerOptions {
  /**
   * The model to start from, typically the engine's. The trainer trains its own copy of the
   * weights; `model` itself is never changed (the engine keeps serving the last published weights).
   */
  model: CausalLanguageModel;
  /** An engine in this process: UpdateWeights hands it the weights directly (no disk). */
  engine?: InferenceEngine;
  /**
   * Engines in other processes (`http://host:port`): UpdateWeights writes a checkpoint and calls
   * their `/update_weights_from_disk`. Used when `engine` is unset, or when a request names URLs.
   */
  engineUrls?: readonly string[];
  /** Where UpdateWeights writes checkpoints for `engineUrls`. Default: a new temporary directory. */
  weightsDirectory?: string;
  /** A model directory whose tokenizer files are copied into every checkpoint written. */
  tokenizerDirectory?: string;
  /**
   * The rollout sampling temperature: logprobs are recomputed at it, as the engine reported them
   * (below 1e-5 means greedy, whose logprobs are at temperature 1). Default 1.
   */
  temperature?: number;
  /** Adam learning rate when a Train call's LossConfig has none. Default 1e-3. */
  learningRate?: number;
  /**
   * Largest learning rate a Train call may ask for. Adam moves every weight by up to the learning
   * rate per step, so anything near 1 already destroys a model. Default 1.
   */
  maxLearningRate?: number;
  /** Global gradient-norm clip (slime's `--clip-grad`); 0 disables. Default 1. */
  maxGradientNorm?: number;
  /**
   * Largest micro-batch, in padded positions (rows × longest row). Bigger batches accumulate
   * gradients over several micro-batches before one Adam step, so memory stays bounded. Default 4096.
   */
  maxMicroBatchTokens?: number;
  /** Weight version of the initial weights. Default: the engine's, else `default`. */
  weightVersion?: string;
  /** Reported by GetInfo. Default `dressage-embedded`. */
  modelName?: string;
  /** Abort the engines' running requests when publishing weights. Default false (they finish first). */
  abortAllRequests?: boolean;
  /** Receives one line per Train step and weight update. */
  log?: (message: string) => void;
  /**
   * Receives, after every policy-loss step, the trainer's logprob of each response token of the
   * packed batch (in the batch's order), computed with the weights before the update; NaN where the
   * token is not trainable. A caller that knows which weight version produced each token can then
   * split the parity figure (tokens of the trainer's own version) from the off-policy gap (older
   * ones), which the batch itself cannot say.
   */
  onTrainLogProbs?: (logProbs: Float32Array, batch: PackedTrainBatch) => void;
}

/** Parity of recomputed and rollout logprobs over trainable tokens. */
interface ParityAccumulator {
  sum: number;
  max: number;
  count: number;
}

function invalid(message: string, details: Record<string, unknown> = {}): DressageError {
  return new DressageError({ code: 'invalid_argument', message, details });
}

/** The next automatic version: a trailing number is incremented (`v7` → `v8`), anything else starts at `1`. */
export function nextWeightVersion(version: string): string {
  const match = /^(.*?)(\d+)$/.exec(version);
  return match === null ? '1' : `${match[1]}${BigInt(match[2]!) + 1n}`;
}

function addGradients(total: tf.NamedTensorMap | null, next: tf.NamedTensorMap): tf.NamedTensorMap {
  if (total === null) return next;
  const sum: tf.NamedTensorMap = {};
  for (const [name, gradient] of Object.entries(total)) {
    sum[name] = tf.add(gradient, next[name]!);
    gradient.dispose();
    next[name]!.dispose();
  }
  return sum;
}

function disposeGradients(gradients: tf.NamedTensorMap | null): void {
  if (gradients !== null) for (const gradient of Object.values(gradients)) gradient.dispose();
}

// Padded position (row, p − 1) predicts response token j at p = total − response + j (see
// buildMicroBatch); trainable positions are copied back to the packed batch's order.
function scatterToPacked(micro: MicroBatch, padded: Float32Array, out: Float32Array): void {
  const masks = micro.lossBatch.loss_masks;
  micro.spans.forEach((span, row) => {
    const promptLength = span.totalLength - span.responseLength;
    for (let token = 0; token < span.responseLength; token++) {
      const position = promptLength + token;
      if (position === 0) continue;
      const index = row * micro.length + position - 1;
      if (masks[index] === 1) out[span.responseOffset + token] = padded[index]!;
    }
  });
}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * The embedded TrainerService: Adam on slime's policy loss (or a supervised loss) over the tiny
 * causal LM, with weights published to the inference engine. Hand it to `startTrainerServer`
 * from `@dressage/trainer-bridge` (or use {@link startEmbeddedTrainerServer}).
 *
 * Every Train call is one optimizer step: the whole packed batch goes through one differentiable
 * pass (split into micro-batches whose gradients add up), and the step reports
 * `train_rollout_logprob_abs_diff` (mean) and `train_rollout_logprob_abs_diff_max` over trainable
 * tokens, measured with the weights before the update. With on-policy data both are at float
 * rounding level (≤ 1e-4): anything larger means a token, mask or logprob is out of place.
 *
 * With `use_kl_loss`, the KL reference is a frozen copy of the weights taken at the first
 * policy-loss step that asks for it (in a run, the weights RL starts from: slime's `--ref-load`);
 * checkpoints carry it, so a resumed run keeps the same reference. With `entropy_coef` ≠ 0 the
 * entropy of each trained position's whole distribution (at `temperature`) enters the loss.
 *
 * Calls are serialized: a Train step, a weight update and a checkpoint never overlap.
 */
export class EmbeddedTrainer implements TrainerImplementation {
  /** The model being trained (the trainer's own copy). */
  readonly model: CausalLanguageModel;
  readonly #engine: InferenceEngine | undefined;
  readonly #engineUrls: readonly string[];
  readonly #tokenizerDirectory: string | undefined;
  readonly #temperature: number;
  readonly #defaultLearningRate: number;
  readonly #maxLearningRate: number;
  readonly #maxGradientNorm: number;
  readonly #maxMicroBatchTokens: number;
  readonly #modelName: string;
  readonly #abortAllRequests: boolean;
  readonly #log: ((message: string) => void) | undefined;
  readonly #onTrainLogProbs: ((logProbs: Float32Array, batch: PackedTrainBatch) => void) | undefined;
  readonly #variables: tf.Variable[];
  #weightsDirectory: string | undefined;
  #publishedDirectory: string | null = null;
  #optimizer: AdjustableAdam;
  // The KL loss's reference, captured at the first policy-loss step with use_kl_loss.
  #reference: ReferencePolicy | null = null;
  // Recent policy-loss gradient norms, for LossConfig.clip_grad_spike.
  #spikeClip = new GradientSpikeClip();
  #weightVersion: string;
  #trainSteps = 0;
  #rolloutId = 0;
  #busy = false;
  #disposed = false;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(options: EmbeddedTrainerOptions) {
    const source = options.model;
    this.model = CausalLanguageModel.fromWeights(source.vocabulary, source.config, source.getWeights());
    this.#engine = options.engine;
    this.#engineUrls = [...(options.engineUrls ?? [])];
    this.#weightsDirectory = options.weightsDirectory;
    this.#tokenizerDirectory = options.tokenizerDirectory;
    const temperature = options.temperature ?? 1;
    if (!(temperature >= 0) || !Number.isFinite(temperature)) {
      throw invalid(`temperature must be a finite number ≥ 0, got ${temperature}`);
    }
    this.#temperature = logprobTemperature({ temperature, topP: 1, topK: -1 });
    this.#maxLearningRate = options.maxLearningRate ?? 1;
    if (!(this.#maxLearningRate > 0) || !Number.isFinite(this.#maxLearningRate)) {
      throw invalid(`maxLearningRate must be a positive finite number, got ${this.#maxLearningRate}`);
    }
    this.#defaultLearningRate = checkLearningRate(options.learningRate ?? 1e-3, this.#maxLearningRate);
    this.#maxGradientNorm = options.maxGradientNorm ?? 1;
    this.#maxMicroBatchTokens = options.maxMicroBatchTokens ?? 4096;
    if (!(this.#maxMicroBatchTokens >= 1)) {
      throw invalid(`maxMicroBatchTokens must be at least 1, got ${this.#maxMicroBatchTokens}`);
    }
    this.#modelName = options.modelName ?? 'dressage-embedded';
    this.#abortAllRequests = options.abortAllRequests ?? false;
    this.#log = options.log;
    this.#onTrainLogProbs = options.onTrainLogProbs;
    this.#weightVersion = options.weightVersion ?? options.engine?.weightVersion ?? 'default';
    this.#variables = this.model.specs.map((spec) => this.model.parameters.get(spec.name)!);
    this.#optimizer = createAdam(this.#defaultLearningRate);
  }

  /** Version label of the last published (or loaded) weights. */
  get weightVersion(): string {
    return this.#weightVersion;
  }

  /** Train calls completed (optimizer steps attempted, including empty ones). */
  get trainSteps(): number {
    return this.#trainSteps;
  }

  /** The temperature logprobs are recomputed at. */
  get temperature(): number {
    return this.#temperature;
  }

  /** TrainerService GetInfo. */
  getInfo(): Partial<GetInfoResponse> {
    const { config, vocabulary } = this.model;
    return {
      trainer_kind: 'embedded',
      model_name: this.#modelName,
      weight_version: this.#weightVersion,
      vocab_size: Math.max(0, ...vocabulary.tokenIds) + 1,
      max_tokens_per_sample: config.contextLength + 1,
      backend: tf.getBackend(),
      data_parallel_size: 1,
      train_steps: this.#trainSteps,
      labels: {
        parameters: String(this.model.parameterCount),
        context_length: String(config.contextLength),
        temperature: String(this.#temperature),
        learning_rate: String(this.#optimizer.currentLearningRate),
        max_micro_batch_tokens: String(this.#maxMicroBatchTokens),
      },
    };
  }

  /** TrainerService Health: BUSY while a step, update or checkpoint runs. */
  health(): Partial<HealthResponse> {
    if (this.#disposed) return { status: HealthStatus.STATUS_NOT_SERVING, message: 'disposed' };
    return this.#busy
      ? { status: HealthStatus.STATUS_BUSY, message: 'training, updating weights or checkpointing' }
      : { status: HealthStatus.STATUS_SERVING, message: 'serving' };
  }

  /**
   * TrainerService Train: one Adam step on a packed batch. `header.loss` selects the loss
   * (`loss_type`), its settings and the learning rate; `header.global_batch_size` the per-rollout
   * reducer's step size.
   * A step whose loss or gradient norm is not finite is not applied: the weights and Adam's moments
   * stay as they were, and the response has `optimizer_steps` 0 and `metrics.nonfinite_step_skipped` 1.
   * @throws DressageError `invalid_argument` for a batch carrying routed experts, a sample longer than the context, an unknown loss
   * type, a trainable token outside the vocabulary, a NaN or infinite reward, loss denominator or
   * logprob (naming the sample and field), a learning rate outside (0, `maxLearningRate`] or an
   * invalid loss setting; `failed_precondition` when `use_kl_loss` would capture a reference from
   * weights that are not finite; `cancelled` /
   * `deadline_exceeded` when `signal` fires between micro-batches (no update is applied then).
   */
  train(
    header: Partial<TrainBatchHeader>,
    batch: PackedTrainBatch,
    signal?: AbortSignal,
  ): Promise<Partial<TrainResponse>> {
    return this.#exclusive(() => this.#train(header, batch, signal));
  }

  /**
   * TrainerService UpdateWeights: labels the trained weights (`weight_version`, or the next
   * version) and publishes them, to the in-process engine by assignment, or to engine URLs through
   * a checkpoint and `/update_weights_from_disk`.
   * @throws DressageError `failed_precondition` when any weight is NaN or infinite (nothing is published).
   */
  updateWeights(request: Partial<UpdateWeightsRequest> = {}): Promise<Partial<UpdateWeightsResponse>> {
    return this.#exclusive(() => this.#updateWeights(request));
  }

  /**
   * TrainerService SaveCheckpoint: the model (bit-exact weights, `loadModel` reads it), the weight
   * version, the step counters, Adam's moments and the KL reference weights (once captured).
   * @throws DressageError `failed_precondition` when any weight is NaN or infinite (nothing is written).
   */
  saveCheckpoint(request: Partial<SaveCheckpointRequest>): Promise<Partial<SaveCheckpointResponse>> {
    return this.#exclusive(() => this.#saveCheckpoint(request));
  }

  /**
   * TrainerService LoadCheckpoint: restores weights, version, counters and (when stored) Adam's
   * moments and the KL reference; a checkpoint without a reference leaves none, so the next
   * `use_kl_loss` step captures the loaded weights. The engines keep their weights until the next
   * UpdateWeights.
   * @throws DressageError `failed_precondition` when the checkpoint is for another model, or holds a
   * NaN or infinite weight, Adam moment or reference weight (nothing of it is applied).
   */
  loadCheckpoint(request: Partial<LoadCheckpointRequest>): Promise<Partial<LoadCheckpointResponse>> {
    return this.#exclusive(() => this.#loadCheckpoint(request));
  }

  /** Frees the model and optimizer, and removes weights this trainer wrote to a temporary directory. */
  async dispose(): Promise<void> {
    await this.#exclusive(async () => {
      if (this.#disposed) return;
      this.#disposed = true;
      this.#optimizer.dispose();
      this.#reference?.dispose();
      this.#reference = null;
      this.model.dispose();
      if (this.#publishedDirectory !== null)
        await rm(this.#publishedDirectory, { recursive: true, force: true });
    });
  }

  #exclusive<T>(run: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(async () => {
      if (this.#disposed) {
        throw new DressageError({ code: 'failed_precondition', message: 'The trainer was disposed' });
      }
      this.#busy = true;
      try {
        return await run();
      } finally {
        this.#busy = false;
      }
    });
    this.#queue = next.catch(() => undefined);
    return next;
  }

  async #train(
    header: Partial<TrainBatchHeader>,
    batch: PackedTrainBatch,
    signal: AbortSignal | undefined,
  ): Promise<Partial<TrainResponse>> {
    const started = performance.now();
    const { lossType, spikeFactor, stepOptions, resolved } = this.#checkStep(header, batch);
    const spans = sampleSpans(batch, this.model.config.contextLength);
    const trainable = trainableTokenCount(batch);
    const groups = planMicroBatches(spans, this.#maxMicroBatchTokens);
    const metrics: Record<string, number> = {};
    const parity: ParityAccumulator = { sum: 0, max: 0, count: 0 };
    const trainLogProbs =
      this.#onTrainLogProbs !== undefined && lossType === 'policy_loss'
        ? new Float32Array(batch.loss_masks.length).fill(Number.NaN)
        : null;
    // The KL reference is frozen the first time a policy-loss step asks for it: the weights the
    // RL phase starts from (a warm-start's supervised steps come before).
    const reference = lossType === 'policy_loss' && resolved.useKlLoss ? this.#captureReference() : null;
    let gradients: tf.NamedTensorMap | null = null;
    let optimizerSteps = 0;
    try {
      for (const [index, spans] of groups.entries()) {
        if (index > 0) await yieldToEventLoop();
        signal?.throwIfAborted();
        const micro = buildMicroBatch(this.model, batch, spans);
        const result = this.#microBatchGradients(
          micro,
          lossType,
          stepOptions,
          reference,
          parity,
          trainLogProbs,
        );
        gradients = addGradients(gradients, result.gradients);
        for (const [name, value] of Object.entries(result.metrics))
          metrics[name] = (metrics[name] ?? 0) + value;
      }
      signal?.throwIfAborted();
      if (gradients !== null && trainable > 0) {
        const applied = this.#applyGradients(gradients, metrics, lossType, spikeFactor);
        gradients = applied.gradients;
        optimizerSteps = applied.optimizerSteps;
      }
    } finally {
      disposeGradients(gradients);
    }
    this.#trainSteps += 1;
    this.#rolloutId = header.rollout_id ?? this.#rolloutId;
    if (trainLogProbs !== null) this.#onTrainLogProbs?.(trainLogProbs, batch);
    if (parity.count > 0) {
      metrics.train_rollout_logprob_abs_diff = parity.sum / parity.count;
      metrics.train_rollout_logprob_abs_diff_max = parity.max;
    }
    metrics.tokens = trainable;
    metrics.learning_rate = this.#optimizer.currentLearningRate;
    metrics.micro_batches = groups.length;
    const duration = (performance.now() - started) / 1000;
    this.#log?.(
      `embedded trainer: step ${this.#trainSteps} (${lossType}) on ${batch.sample_count} samples / ${trainable} trainable tokens, loss ${metrics.loss ?? 0}, ${duration.toFixed(3)} s`,
    );
    return {
      samples_trained: batch.sample_count,
      tokens_trained: trainable,
      optimizer_steps: optimizerSteps,
      metrics,
      duration_seconds: duration,
    };
  }

  // Everything a step checks before it computes anything: the batch's values, the loss type, the
  // learning rate (set on the optimizer) and the spike clip; and the loss options of the whole batch.
  #checkStep(
    header: Partial<TrainBatchHeader>,
    batch: PackedTrainBatch,
  ): {
    lossType: EmbeddedLossType;
    spikeFactor: number | null;
    stepOptions: PolicyLossOptions;
    resolved: ReturnType<typeof resolvePolicyLossOptions>;
  } {
    if (batch.routed_experts) {
      // Replaying them needs a mixture-of-experts model; training without would silently drop them.
      throw invalid(
        'The batch carries routed experts (routing replay, R3), which the embedded trainer cannot replay: ' +
          'its model has no experts. Turn routing replay off, or train on the Megatron worker with --use-rollout-routing-replay',
        { field: 'routed_experts' },
      );
    }
    const lossType = (header.loss?.loss_type ?? 'policy_loss') as EmbeddedLossType;
    if (lossType !== 'policy_loss' && lossType !== 'sft_loss') {
      throw invalid(`Unknown loss_type "${lossType}"; expected policy_loss or sft_loss`, {
        loss_type: lossType,
      });
    }
    const learningRate = checkLearningRate(
      header.loss?.learning_rate ?? this.#defaultLearningRate,
      this.#maxLearningRate,
    );
    checkTrainBatchValues(batch);
    const spikeFactor = lossType === 'policy_loss' ? (header.loss?.clip_grad_spike ?? null) : null;
    if (spikeFactor !== null) checkGradientSpikeFactor(spikeFactor);
    const options = policyLossOptionsFromLossConfig(header.loss, header.global_batch_size ?? 0);
    const resolved = resolvePolicyLossOptions(options);
    this.#optimizer.currentLearningRate = learningRate;
    // Reducer constants of the whole batch, so micro-batch losses add up to the batch loss.
    const stepOptions: PolicyLossOptions = {
      ...options,
      globalBatchSize: effectiveGlobalBatchSize(batch, resolved),
      tokenNormalizer: resolved.tokenNormalizer ?? trainableTokenCount(batch),
    };
    return { lossType, spikeFactor, stepOptions, resolved };
  }

  // Clips the summed gradients (the fixed limit, and the spike limit of a policy-loss step) and
  // applies them, unless the loss or the norm is not finite. Returns the gradients to dispose.
  #applyGradients(
    summed: tf.NamedTensorMap,
    metrics: Record<string, number>,
    lossType: EmbeddedLossType,
    spikeFactor: number | null,
  ): { gradients: tf.NamedTensorMap; optimizerSteps: number } {
    const fixedLimit = this.#maxGradientNorm > 0 ? this.#maxGradientNorm : Number.POSITIVE_INFINITY;
    const spikeLimit = spikeFactor === null ? null : this.#spikeClip.limit(spikeFactor);
    const limit = Math.min(fixedLimit, spikeLimit ?? Number.POSITIVE_INFINITY);
    const clipped = Number.isFinite(limit)
      ? clipGradientsByGlobalNorm(summed, limit)
      : { gradients: summed, norm: globalNorm(summed) };
    metrics.grad_norm = clipped.norm;
    if (spikeLimit !== null) {
      metrics.grad_spike_limit = spikeLimit;
      metrics.grad_spike_clipped = clipped.norm > spikeLimit && spikeLimit < fixedLimit ? 1 : 0;
    }
    // A non-finite loss or gradient would turn every weight (and Adam's moments) into NaN: the
    // step is skipped, the weights and optimizer stay as they were, and the response says so.
    if (!Number.isFinite(clipped.norm) || !Number.isFinite(metrics.loss ?? 0)) {
      metrics.nonfinite_step_skipped = 1;
      this.#log?.(
        `embedded trainer: step skipped, loss ${metrics.loss} and gradient norm ${clipped.norm} are not both finite; the weights are unchanged`,
      );
      return { gradients: clipped.gradients, optimizerSteps: 0 };
    }
    this.#optimizer.applyGradients(
      Object.entries(clipped.gradients).map(([name, tensor]) => ({ name, tensor })),
    );
    if (lossType === 'policy_loss') this.#spikeClip.record(clipped.norm);
    return { gradients: clipped.gradients, optimizerSteps: 1 };
  }

  #captureReference(): ReferencePolicy {
    if (this.#reference === null) {
      checkFiniteWeights(this.model.getWeights(), 'Train', 'freeze them as the KL reference');
      this.#reference = ReferencePolicy.capture(this.model);
      this.#log?.(
        `embedded trainer: KL reference frozen from the weights at step ${this.#trainSteps} (version ${this.#weightVersion})`,
      );
    }
    return this.#reference;
  }

  // One differentiable pass over a micro-batch: gradients of its share of the loss, its share of
  // the (additive) metrics, and the parity of the recomputed logprobs before any update. With a
  // reference, its logprobs come from a pass without gradients first; with an entropy coefficient,
  // the entropy comes from the same logits as the logprobs.
  #microBatchGradients(
    micro: MicroBatch,
    lossType: EmbeddedLossType,
    options: PolicyLossOptions,
    reference: ReferencePolicy | null,
    parity: ParityAccumulator,
    trainLogProbs: Float32Array | null,
  ): { gradients: tf.NamedTensorMap; metrics: Record<string, number> } {
    const { rows, length, lossBatch } = micro;
    const outputs = this.model.vocabulary.outputCount;
    const slots = tf.tensor2d(micro.inputSlots, [rows, length], 'int32');
    // Targets are data, built before differentiation: one-hot rows for trained positions, zero
    // rows elsewhere (their logprob is then exactly 0 and their weight is 0).
    const targetOneHot = tf.tidy(
      () =>
        tf
          .oneHot(tf.tensor1d(micro.targetClasses, 'int32'), outputs)
          .mul(tf.tensor2d(lossBatch.loss_masks, [rows * length, 1], 'float32'))
          .reshape([rows, length, outputs]) as tf.Tensor3D,
    );
    let current: Float32Array = new Float32Array(0);
    // The entropy only when it enters the loss: it reads every output of every position.
    const withEntropy = lossType === 'policy_loss' && (options.entropyCoef ?? 0) !== 0;
    const forwardPass = (): { logProbs: tf.Tensor1D; entropy?: tf.Tensor1D } => {
      const logits = this.model.forward(slots, { differentiable: true });
      const picked: { logProbs: tf.Tensor2D; entropy?: tf.Tensor2D } = withEntropy
        ? this.model.targetLogprobsWithEntropy(logits, targetOneHot, this.#temperature)
        : { logProbs: this.model.targetLogprobs(logits, targetOneHot, this.#temperature) };
      const logProbs = picked.logProbs.reshape([rows * length]) as tf.Tensor1D;
      current = (logProbs.dataSync() as Float32Array).slice();
      return picked.entropy === undefined
        ? { logProbs }
        : { logProbs, entropy: picked.entropy.reshape([rows * length]) as tf.Tensor1D };
    };
    try {
      let gradients: tf.NamedTensorMap;
      let metrics: Record<string, number>;
      if (lossType === 'policy_loss') {
        const refLogProbs = reference?.logProbs(slots, targetOneHot, this.#temperature);
        const result = policyLossGradients(
          () => ({ ...forwardPass(), ...(refLogProbs === undefined ? {} : { refLogProbs }) }),
          lossBatch,
          options,
          this.#variables,
        );
        gradients = result.gradients;
        metrics = { ...result.metrics };
        // Replaced below by the plain token mean and max over the whole batch.
        delete metrics.train_rollout_logprob_abs_diff;
        // Not computed without an entropy coefficient: no made-up 0 in the response.
        if (!withEntropy) delete metrics.entropy_loss;
      } else {
        const weights = reducerWeights(lossBatch, resolvePolicyLossOptions(options));
        const { value, grads } = tf.variableGrads(
          () => tf.sum(tf.mul(forwardPass().logProbs, tf.tensor1d(weights, 'float32'))).neg() as tf.Scalar,
          this.#variables,
        );
        const loss = value.dataSync()[0]!;
        value.dispose();
        gradients = grads;
        metrics = { loss, sft_loss: loss };
      }
      if (trainLogProbs !== null) scatterToPacked(micro, current, trainLogProbs);
      const rollout = lossBatch.rollout_log_probs;
      if (rollout !== null) {
        for (let index = 0; index < lossBatch.loss_masks.length; index++) {
          if (lossBatch.loss_masks[index] === 0) continue;
          const difference = Math.abs(current[index]! - rollout[index]!);
          parity.sum += difference;
          parity.max = Math.max(parity.max, difference);
          parity.count += 1;
        }
      }
      return { gradients, metrics };
    } finally {
      slots.dispose();
      targetOneHot.dispose();
    }
  }

  async #updateWeights(request: Partial<UpdateWeightsRequest>): Promise<Partial<UpdateWeightsResponse>> {
    const started = performance.now();
    const version = request.weight_version || nextWeightVersion(this.#weightVersion);
    const requestedUrls = request.engine_urls ?? [];
    const urls = requestedUrls.length > 0 ? requestedUrls : this.#engineUrls;
    const weights = this.model.getWeights();
    checkFiniteWeights(weights, 'UpdateWeights', 'publish them to an engine');
    let enginesUpdated = 0;
    if (requestedUrls.length === 0 && this.#engine !== undefined) {
      await this.#engine.updateWeights(
        { weights, weightVersion: version },
        { abortAllRequests: this.#abortAllRequests },
      );
      enginesUpdated += 1;
    }
    let modelPath = '';
    if (urls.length > 0) {
      modelPath = await this.#writePublishedWeights(version);
      for (const url of urls) await this.#updateEngineFromDisk(url, modelPath, version);
      enginesUpdated += urls.length;
    }
    this.#weightVersion = version;
    this.#log?.(`embedded trainer: published weight version ${version} to ${enginesUpdated} engine(s)`);
    return {
      weight_version: version,
      model_path: modelPath,
      engines_updated: enginesUpdated,
      duration_seconds: (performance.now() - started) / 1000,
    };
  }

  // One directory per version: an engine still reading the previous one never sees a mix. The
  // previous directory goes once the new one is published.
  async #writePublishedWeights(version: string): Promise<string> {
    this.#weightsDirectory ??= await mkdtemp(join(tmpdir(), 'dressage-embedded-weights-'));
    await mkdir(this.#weightsDirectory, { recursive: true });
    const directory = join(
      this.#weightsDirectory,
      `weights-${this.#trainSteps}-${version.replace(/[^A-Za-z0-9._-]/g, '_')}`,
    );
    await saveCheckpoint(directory, this.model, {
      weightVersion: version,
      ...(this.#tokenizerDirectory === undefined ? {} : { tokenizerDirectory: this.#tokenizerDirectory }),
    });
    const previous = this.#publishedDirectory;
    this.#publishedDirectory = directory;
    if (previous !== null && previous !== directory) await rm(previous, { recursive: true, force: true });
    return directory;
  }

  async #updateEngineFromDisk(url: string, modelPath: string, version: string): Promise<void> {
    const endpoint = `${url.replace(/\/+$/, '')}/update_weights_from_disk`;
    let response: Response;
    try {
      response = await fetch(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model_path: modelPath,
          weight_version: version,
          abort_all_requests: this.#abortAllRequests,
        }),
      });
    } catch (error) {
      throw new DressageError({
        code: 'unavailable',
        message: `Could not reach the engine at ${url} to update its weights: ${(error as Error).message}`,
        cause: error,
        details: { url },
      });
    }
    const text = await response.text();
    let success = false;
    try {
      success = (JSON.parse(text) as { success?: boolean }).success === true;
    } catch {
      success = false;
    }
    if (!response.ok || !success) {
      throw new DressageError({
        code: response.status >= 500 || response.ok ? 'internal' : 'failed_precondition',
        message: `The engine at ${url} refused the weights in ${modelPath} (HTTP ${response.status}): ${text.slice(0, 500)}`,
        details: { url, status: response.status, model_path: modelPath },
      });
    }
  }

  async #saveCheckpoint(request: Partial<SaveCheckpointRequest>): Promise<Partial<SaveCheckpointResponse>> {
    const directory = request.path ?? '';
    if (directory === '') throw invalid('SaveCheckpoint needs a path');
    checkFiniteWeights(this.model.getWeights(), 'SaveCheckpoint', 'write them');
    const rolloutId = request.rollout_id ?? this.#rolloutId;
    await saveCheckpoint(directory, this.model, {
      weightVersion: this.#weightVersion,
      ...(this.#tokenizerDirectory === undefined ? {} : { tokenizerDirectory: this.#tokenizerDirectory }),
    });
    const moments = await readOptimizerMoments(this.#optimizer, this.model.specs);
    const parameters = this.model.specs.map((spec) => spec.name);
    const stateBytes = await writeTrainerState(
      directory,
      {
        train_steps: this.#trainSteps,
        rollout_id: rolloutId,
        weight_version: this.#weightVersion,
        learning_rate: this.#optimizer.currentLearningRate,
        gradient_norms: [...this.#spikeClip.norms],
      },
      moments === null ? null : { ...moments, parameters },
      this.#reference === null
        ? null
        : { parameters, bytes: packWeights(this.#reference.getWeights(), this.model.specs) },
    );
    const weightBytes = this.model.parameterCount * 4;
    return {
      path: directory,
      rollout_id: rolloutId,
      size_bytes: weightBytes + stateBytes,
      weight_version: this.#weightVersion,
    };
  }

  async #loadCheckpoint(request: Partial<LoadCheckpointRequest>): Promise<Partial<LoadCheckpointResponse>> {
    const directory = request.path ?? '';
    if (directory === '') throw invalid('LoadCheckpoint needs a path');
    const checkpoint = await loadWeightsFor(this.model, directory);
    const stored = await readTrainerState(directory);
    // A checkpoint of a run that diverged would make every later step NaN: refused whole, before
    // anything of it is applied.
    const referenceWeights =
      stored?.reference && stored.state.reference
        ? unpackWeights(stored.reference, stored.state.reference.parameters, this.model.specs)
        : null;
    const found = firstNonFinite([
      ...[...checkpoint.weights].map(([name, values]) => [`parameter ${name}`, values] as const),
      ...(stored?.moments ? [['Adam moments', stored.moments] as const] : []),
      ...[...(referenceWeights ?? [])].map(([name, values]) => [`KL reference ${name}`, values] as const),
    ]);
    if (found !== null) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `LoadCheckpoint refused: the checkpoint in ${directory} holds a non-finite number: ${found.name}[${found.index}] is ${found.value}; it was saved from weights that had diverged; load an earlier checkpoint`,
        details: { path: directory, entry: found.name, index: found.index, value: String(found.value) },
      });
    }
    let optimizer: AdjustableAdam;
    if (stored?.state.optimizer && stored.moments !== null) {
      optimizer = await restoreAdam(
        stored.state.learning_rate,
        stored.state.optimizer,
        stored.moments,
        this.model.specs,
        this.#variables,
      );
    } else {
      optimizer = createAdam(stored?.state.learning_rate ?? this.#defaultLearningRate);
    }
    const reference =
      referenceWeights === null ? null : ReferencePolicy.fromWeights(this.model, referenceWeights);
    this.model.setWeights(checkpoint.weights);
    this.#optimizer.dispose();
    this.#optimizer = optimizer;
    this.#reference?.dispose();
    this.#reference = reference;
    this.#weightVersion = checkpoint.weightVersion;
    this.#trainSteps = stored?.state.train_steps ?? 0;
    this.#rolloutId = stored?.state.rollout_id ?? 0;
    this.#spikeClip = new GradientSpikeClip(stored?.state.gradient_norms ?? []);
    return { path: directory, rollout_id: this.#rolloutId, weight_version: this.#weightVersion };
  }
}

function checkLearningRate(value: number, maximum: number): number {
  if (!(value > 0) || !(value <= maximum)) {
    throw invalid(`loss.learning_rate must be a positive number ≤ ${maximum}, got ${value}`, {
      field: 'loss.learning_rate',
      learning_rate: value,
      max_learning_rate: maximum,
    });
  }
  return value;
}

/** The first NaN or infinity among named arrays, or null when every number is finite. */
function firstNonFinite(
  arrays: Iterable<readonly [string, Float32Array]>,
): { name: string; index: number; value: number } | null {
  for (const [name, values] of arrays) {
    for (let index = 0; index < values.length; index++) {
      const value = values[index] as number;
      // NaN - NaN and ±Inf - ±Inf are NaN: one subtraction tests both.
      if (value - value !== 0) return { name, index, value };
    }
  }
  return null;
}

// Never written or published: weights with a NaN or infinity in them.
function checkFiniteWeights(weights: ReadonlyMap<string, Float32Array>, method: string, what: string): void {
  const found = firstNonFinite(weights);
  if (found === null) return;
  const { name, index, value } = found;
  throw new DressageError({
    code: 'failed_precondition',
    message: `${method} refused: parameter ${name}[${index}] is ${value}; the trainer does not ${what} while any weight is not finite (load a checkpoint to recover)`,
    details: { parameter: name, index, value: String(value) },
  });
}

function globalNorm(gradients: tf.NamedTensorMap): number {
  return tf.tidy(() => {
    const squares = Object.values(gradients).map((gradient) => tf.sum(tf.square(gradient)));
    return squares.length === 0 ? 0 : Math.sqrt(tf.addN(squares).dataSync()[0]!);
  });
}
