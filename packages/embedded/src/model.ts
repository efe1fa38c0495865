import { DressageError } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import { DecodeBatch } from './decode-batch.js';
import { differentiableProduct, type MatrixProduct, plainProduct } from './linear.js';
import { type ModelConfig, resolveModelConfig } from './model-config.js';
import { SeededRandom } from './random.js';
import {
  disposeCache,
  maskValue,
  type SequenceCache,
  type StackedStepInput,
  type StackedStepOutput,
} from './sequence-cache.js';
import type { TokenVocabulary } from './vocabulary.js';

// The model. Its batched decode is decode-batch.ts; the caches both use are sequence-cache.ts.

/** Model weights by parameter name, as flat float32 arrays (row-major). */
export type NamedWeights = ReadonlyMap<string, Float32Array>;

/** Name and shape of one parameter. */
export interface ParameterSpec {
  name: string;
  shape: number[];
}

/** Options of {@link CausalLanguageModel.forward}. */
export interface ForwardOptions {
  /**
   * Embeds through a one-hot matmul instead of a gather: the two give identical values, but only the
   * matmul has a gradient on every backend. Set it inside functions being differentiated.
   */
  differentiable?: boolean;
  /**
   * Queries attended to at once (default 512; `Infinity`: always one pass): a longer sequence
   * attends in chunks of this many, each chunk to the keys up to its last position, with the
   * values of one pass.
   */
  attentionChunkLength?: number;
}

/** Token sequences prepared for a batched forward pass (right-padded, targets shifted by one). */
export interface PreparedBatch {
  /** Batch rows. */
  batchSize: number;
  /** Padded length (the longest sequence minus one). */
  length: number;
  /** Input slots `[batchSize * length]`, row-major. */
  inputSlots: Int32Array;
  /** Output class of the next token at each position, -1 where none (padding or an id outside the table). */
  targetClasses: Int32Array;
}

/**
 * Prompt positions read per step of {@link CausalLanguageModel.prefill}: attention scores of one step
 * take `heads × 512 × length` floats (128 MiB for 4 heads at 16,384 positions).
 */
export const defaultPrefillChunkLength = 512;

// The longest sequence a full (training or scoring) pass attends to in one step; longer ones
// attend in chunks of this many queries, as the engine's prefill reads a prompt.
const defaultAttentionChunkLength = 512;

// Additive mask value: large enough that exp() underflows to exactly 0, small enough to stay finite.
const normEpsilon = 1e-5;
// tfjs registers variables by name process-wide: each model prefixes its own. The counter lives on
// globalThis so two installed copies of this package never hand out the same prefix.
const modelCounterKey = Symbol.for('dressage.embedded.modelCounter');
function nextModelScope(): string {
  const holder = globalThis as unknown as Record<symbol, number | undefined>;
  holder[modelCounterKey] = (holder[modelCounterKey] ?? 0) + 1;
  return `embedded-model-${holder[modelCounterKey]}`;
}

/** Every parameter of a model of this shape, in a fixed order (the checkpoint order). */
export function parameterSpecs(config: ModelConfig, vocabulary: TokenVocabulary): ParameterSpec[] {
  const { modelDimension: width, feedForwardDimension: hidden } = config;
  const specs: ParameterSpec[] = [{ name: 'embedding.token', shape: [vocabulary.slotCount, width] }];
  for (let layer = 0; layer < config.layerCount; layer++) {
    const prefix = `layers.${layer}`;
    specs.push(
      { name: `${prefix}.attention_norm.scale`, shape: [width] },
      { name: `${prefix}.attention_norm.bias`, shape: [width] },
      { name: `${prefix}.attention.query`, shape: [width, width] },
      { name: `${prefix}.attention.key`, shape: [width, width] },
      { name: `${prefix}.attention.value`, shape: [width, width] },
      { name: `${prefix}.attention.output`, shape: [width, width] },
      { name: `${prefix}.feed_forward_norm.scale`, shape: [width] },
      { name: `${prefix}.feed_forward_norm.bias`, shape: [width] },
      { name: `${prefix}.feed_forward.up`, shape: [width, hidden] },
      { name: `${prefix}.feed_forward.up_bias`, shape: [hidden] },
      { name: `${prefix}.feed_forward.down`, shape: [hidden, width] },
      { name: `${prefix}.feed_forward.down_bias`, shape: [width] },
    );
  }
  specs.push(
    { name: 'final_norm.scale', shape: [width] },
    { name: 'final_norm.bias', shape: [width] },
    { name: 'output.projection', shape: [width, vocabulary.outputCount] },
    { name: 'output.bias', shape: [vocabulary.outputCount] },
  );
  return specs;
}

function elementCount(shape: readonly number[]): number {
  return shape.reduce((product, size) => product * size, 1);
}

/**
 * Seeded initialization: normal with the config's scale (see `ModelConfig.initialization`), residual
 * outputs scaled down by depth, norms at identity, biases at zero.
 */
function initialWeights(config: ModelConfig, specs: ParameterSpec[]): Map<string, Float32Array> {
  const random = new SeededRandom(config.seed);
  const residualScale = 1 / Math.sqrt(2 * config.layerCount);
  const weights = new Map<string, Float32Array>();
  for (const spec of specs) {
    const values = new Float32Array(elementCount(spec.shape));
    if (spec.name.endsWith('norm.scale')) values.fill(1);
    else if (!spec.name.endsWith('bias')) {
      const base =
        config.initialization === 'small'
          ? 0.02
          : spec.name === 'embedding.token'
            ? 1
            : 1 / Math.sqrt(spec.shape[0]!);
      const scale =
        spec.name.endsWith('attention.output') || spec.name.endsWith('feed_forward.down')
          ? base * residualScale
          : base;
      for (let index = 0; index < values.length; index++) values[index] = random.nextNormal() * scale;
    }
    weights.set(spec.name, values);
  }
  return weights;
}

/**
 * Rotary tables `[contextLength, headDimension]`: cosines and sines of each position's angle per
 * frequency, laid out for the rotate-half convention (the two halves of a head share frequencies).
 */
function rotaryTables(
  contextLength: number,
  headDimension: number,
): { cos: Float32Array; sin: Float32Array } {
  const half = headDimension / 2;
  const cos = new Float32Array(contextLength * headDimension);
  const sin = new Float32Array(contextLength * headDimension);
  for (let position = 0; position < contextLength; position++) {
    for (let index = 0; index < half; index++) {
      const angle = position / 10000 ** (index / half);
      const row = position * headDimension;
      cos[row + index] = cos[row + half + index] = Math.cos(angle);
      sin[row + index] = sin[row + half + index] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

/** Rotary factors for the positions of a pass: `cos` and `sin`, broadcasting over the leading axes. */
interface Rotation {
  cos: tf.Tensor;
  sin: tf.Tensor;
}

/**
 * Rotates queries or keys `[..., length, headDimension]` by their positions: `x·cos + rotateHalf(x)·sin`
 * (unchanged without rotary positions). Elementwise, so the full pass and the cached decode step (one
 * position per row) compute bit-identical values.
 */
function rotate(input: tf.Tensor4D, rotation: Rotation | null): tf.Tensor4D {
  if (rotation === null) return input;
  const half = input.shape[3] / 2;
  const [first, second] = tf.split(input, [half, half], 3);
  const rotated = tf.concat([(second as tf.Tensor4D).neg(), first as tf.Tensor4D], 3);
  return input.mul(rotation.cos).add(rotated.mul(rotation.sin)) as tf.Tensor4D;
}

/** The rows of a `[positions, width]` table at the given positions, stacked (one per decode row). */
function tableRows(table: Float32Array, positions: readonly number[], width: number): Float32Array {
  const rows = new Float32Array(positions.length * width);
  positions.forEach((position, row) => {
    rows.set(table.subarray(position * width, (position + 1) * width), row * width);
  });
  return rows;
}

function sinusoidalTable(contextLength: number, width: number): Float32Array {
  const table = new Float32Array(contextLength * width);
  for (let position = 0; position < contextLength; position++) {
    for (let pair = 0; pair < width / 2; pair++) {
      const angle = position / 10000 ** ((2 * pair) / width);
      table[position * width + 2 * pair] = Math.sin(angle);
      table[position * width + 2 * pair + 1] = Math.cos(angle);
    }
  }
  return table;
}

/**
 * The embedded causal transformer: pre-norm blocks of multi-head attention and a ReLU feed-forward
 * layer, rotary (or sinusoidal) positions, an untied output layer over the known ids of a {@link TokenVocabulary}.
 *
 * One set of numerics serves sampling and training: {@link CausalLanguageModel.prefill} and
 * {@link CausalLanguageModel.decode} (the engine's KV-cache path) and
 * {@link CausalLanguageModel.forward} (a full pass, differentiable) run the same operations, so
 * logprobs reported at sampling time match a recomputation within float rounding.
 */
export class CausalLanguageModel {
  readonly config: ModelConfig;
  readonly vocabulary: TokenVocabulary;
  readonly specs: readonly ParameterSpec[];
  /** Trainable parameters by name (tfjs variables: an optimizer updates them in place). */
  readonly parameters: ReadonlyMap<string, tf.Variable>;
  /** Added to the embeddings (sinusoidal positions), or null with rotary positions. */
  readonly #positions: Float32Array | null;
  readonly #rotary: { cos: Float32Array; sin: Float32Array } | null;
  readonly #alibiSlopes: Float64Array | null;
  readonly #headDimension: number;
  readonly #attentionScale: number;
  #disposed = false;

  private constructor(config: ModelConfig, vocabulary: TokenVocabulary, weights: NamedWeights) {
    this.config = config;
    this.vocabulary = vocabulary;
    this.specs = parameterSpecs(config, vocabulary);
    checkWeights(this.specs, weights);
    const parameters = new Map<string, tf.Variable>();
    const scope = nextModelScope();
    for (const spec of this.specs) {
      const initial = tf.tensor(weights.get(spec.name)!, spec.shape);
      parameters.set(spec.name, tf.variable(initial, true, `${scope}/${spec.name}`));
      initial.dispose();
    }
    this.parameters = parameters;
    this.#headDimension = config.modelDimension / config.headCount;
    this.#positions =
      config.positionEncoding === 'sinusoidal'
        ? sinusoidalTable(config.contextLength, config.modelDimension)
        : null;
    this.#alibiSlopes = config.positionEncoding === 'alibi' ? alibiSlopes(config.headCount) : null;
    this.#rotary =
      config.positionEncoding === 'rotary' ? rotaryTables(config.contextLength, this.#headDimension) : null;
    this.#attentionScale = 1 / Math.sqrt(this.#headDimension);
  }

  /**
   * A freshly initialized model. The same config (seed included) and vocabulary always give the same
   * weights, on every backend.
   */
  static create(vocabulary: TokenVocabulary, config: Partial<ModelConfig> = {}): CausalLanguageModel {
    const resolved = resolveModelConfig(config);
    return new CausalLanguageModel(
      resolved,
      vocabulary,
      initialWeights(resolved, parameterSpecs(resolved, vocabulary)),
    );
  }

  /**
   * A model with given weights (a checkpoint's).
   * @throws DressageError `invalid_argument` when a weight is missing, unexpected or mis-shaped.
   */
  static fromWeights(
    vocabulary: TokenVocabulary,
    config: ModelConfig,
    weights: NamedWeights,
  ): CausalLanguageModel {
    return new CausalLanguageModel(resolveModelConfig(config), vocabulary, weights);
  }

  /** Total parameter count. */
  get parameterCount(): number {
    return this.specs.reduce((sum, spec) => sum + elementCount(spec.shape), 0);
  }

  /** A copy of every weight, bit-exact. */
  getWeights(): Map<string, Float32Array> {
    this.#assertLive();
    const weights = new Map<string, Float32Array>();
    for (const [name, variable] of this.parameters) weights.set(name, Float32Array.from(variable.dataSync()));
    return weights;
  }

  /**
   * Replaces every weight at once. All names and shapes are checked before anything changes, and
   * the assignment is synchronous, so no forward pass ever sees a mix of old and new weights.
   * @throws DressageError `invalid_argument` when the weights do not fit this model.
   */
  setWeights(weights: NamedWeights): void {
    this.#assertLive();
    checkWeights(this.specs, weights);
    const tensors = this.specs.map((spec) => tf.tensor(weights.get(spec.name)!, spec.shape));
    this.specs.forEach((spec, index) => {
      this.parameters.get(spec.name)!.assign(tensors[index]!);
    });
    for (const tensor of tensors) tensor.dispose();
  }

  /** Frees the parameters. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const variable of this.parameters.values()) variable.dispose();
  }

  /**
   * The full forward pass: logits `[batch, length, outputs]` for input slots `[batch, length]`
   * (right padding is harmless: causal attention never looks ahead). Differentiable with
   * `differentiable: true`. The caller owns the result (call it inside `tf.tidy` or dispose it).
   */
  forward(inputSlots: tf.Tensor2D, options: ForwardOptions = {}): tf.Tensor3D {
    this.#assertLive();
    const chunkLength = options.attentionChunkLength ?? defaultAttentionChunkLength;
    if (!(Number.isInteger(chunkLength) || chunkLength === Number.POSITIVE_INFINITY) || chunkLength < 1) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `attentionChunkLength must be a positive integer, got ${chunkLength}`,
      });
    }
    return tf.tidy(() => this.#forwardPass(inputSlots, options.differentiable ?? false, chunkLength));
  }

  /**
   * Log-probabilities `[batch, length]` of target classes under logits divided by `temperature`
   * (SGLang reports logprobs of the temperature-scaled distribution, before top-k/top-p). Picks
   * targets by a one-hot product, so it is differentiable; build `targetOneHot` (`[batch, length,
   * outputs]`, zero rows for no target) outside the function being differentiated.
   */
  targetLogprobs(logits: tf.Tensor3D, targetOneHot: tf.Tensor3D, temperature = 1): tf.Tensor2D {
    return tf.tidy(
      () => tf.logSoftmax(scaleLogits(logits, temperature)).mul(targetOneHot).sum(-1) as tf.Tensor2D,
    );
  }

  /**
   * {@link targetLogprobs} and, from the same log-softmax, the entropy `−Σ p·log p` of each
   * position's whole distribution at `temperature` (`[batch, length]` each). Differentiable in both.
   */
  targetLogprobsWithEntropy(
    logits: tf.Tensor3D,
    targetOneHot: tf.Tensor3D,
    temperature = 1,
  ): { logProbs: tf.Tensor2D; entropy: tf.Tensor2D } {
    return tf.tidy(() => {
      const logSoftmax = tf.logSoftmax(scaleLogits(logits, temperature));
      return {
        logProbs: logSoftmax.mul(targetOneHot).sum(-1) as tf.Tensor2D,
        entropy: tf.exp(logSoftmax).mul(logSoftmax).sum(-1).neg() as tf.Tensor2D,
      };
    });
  }

  /**
   * Per-token logprobs of whole sequences in one batched forward pass, with the numerics of
   * sampling: entry `t` of row `i` is the logprob of `sequences[i][t + 1]` given the tokens before
   * it (NaN where that id is outside the vocabulary). A trainer compares these to rollout logprobs.
   */
  sequenceLogprobs(sequences: ReadonlyArray<ArrayLike<number>>, temperature = 1): Float32Array[] {
    this.#assertLive();
    const batch = this.prepareBatch(sequences);
    if (batch.length === 0) return sequences.map(() => new Float32Array(0));
    const outputs = this.vocabulary.outputCount;
    // Pick each position's target on the backend: only [batch * length] values come back, not the
    // whole [batch, length, outputs] distribution. Positions without a target pick class 0 and are
    // overwritten with NaN below.
    const flatIndices = Int32Array.from(
      batch.targetClasses,
      (target, index) => index * outputs + Math.max(target, 0),
    );
    const picked = tf.tidy(() => {
      const slots = tf.tensor2d(batch.inputSlots, [batch.batchSize, batch.length], 'int32');
      const logprobs = tf.logSoftmax(scaleLogits(this.#forwardPass(slots, false), temperature));
      return tf.gather(logprobs.reshape([-1]), tf.tensor1d(flatIndices, 'int32')).dataSync() as Float32Array;
    });
    return sequences.map((sequence, row) => {
      const result = new Float32Array(Math.max(0, sequence.length - 1));
      for (let position = 0; position < result.length; position++) {
        const index = row * batch.length + position;
        result[position] = batch.targetClasses[index]! < 0 ? Number.NaN : picked[index]!;
      }
      return result;
    });
  }

  /** Right-pads sequences of real ids into input slots and next-token target classes. */
  prepareBatch(sequences: ReadonlyArray<ArrayLike<number>>): PreparedBatch {
    const length = Math.max(0, ...sequences.map((sequence) => sequence.length - 1));
    if (length > this.config.contextLength) {
      throw new DressageError({
        code: 'out_of_range',
        message: `A sequence of ${length + 1} tokens exceeds the model's context length (${this.config.contextLength})`,
      });
    }
    const inputSlots = new Int32Array(sequences.length * length);
    const targetClasses = new Int32Array(sequences.length * length).fill(-1);
    sequences.forEach((sequence, row) => {
      for (let position = 0; position + 1 < sequence.length; position++) {
        inputSlots[row * length + position] = this.vocabulary.slotOf(sequence[position]!);
        targetClasses[row * length + position] = this.vocabulary.outputClassOf(sequence[position + 1]!);
      }
    });
    return { batchSize: sequences.length, length, inputSlots, targetClasses };
  }

  /**
   * Reads a prompt into a new cache. Returns the cache (caller-owned) and the logits of every
   * position (`[length, outputs]`, caller-owned) or only of the last one (`[1, outputs]`).
   *
   * The prompt is read in chunks of `chunkLength` positions (default {@link defaultPrefillChunkLength}):
   * each chunk's queries attend to the cached keys before it and to its own, so the attention scores
   * of one step take `heads × chunkLength × length` floats instead of `heads × length²` (a
   * 7,000-token prompt in one pass needs gigabytes, beyond what the wasm backend can address).
   * A prompt no longer than one chunk takes exactly the single-pass operations.
   */
  prefill(
    slots: Int32Array,
    options: { allPositions?: boolean; chunkLength?: number } = {},
  ): { cache: SequenceCache; logits: tf.Tensor2D } {
    this.#assertLive();
    if (slots.length === 0 || slots.length > this.config.contextLength) {
      throw new DressageError({
        code: 'out_of_range',
        message: `Cannot prefill ${slots.length} tokens with a context length of ${this.config.contextLength}`,
      });
    }
    const chunkLength = options.chunkLength ?? defaultPrefillChunkLength;
    if (!Number.isInteger(chunkLength) || chunkLength < 1) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `chunkLength must be a positive integer, got ${chunkLength}`,
      });
    }
    const cache: SequenceCache = { keys: [], values: [], length: 0 };
    const pieces: tf.Tensor2D[] = [];
    try {
      for (let start = 0; start < slots.length; start += chunkLength) {
        const end = Math.min(slots.length, start + chunkLength);
        const wanted = options.allPositions || end === slots.length;
        const logits = this.#prefillChunk(slots.subarray(start, end), start, cache);
        if (!wanted) {
          logits.dispose();
          continue;
        }
        if (options.allPositions) pieces.push(logits);
        else {
          pieces.push(tf.tidy(() => logits.slice([end - start - 1, 0], [1, -1])));
          logits.dispose();
        }
      }
    } catch (error) {
      disposeCache(cache);
      for (const piece of pieces) piece.dispose();
      throw error;
    }
    if (pieces.length === 1) return { cache, logits: pieces[0]! };
    const logits = tf.concat(pieces, 0);
    for (const piece of pieces) piece.dispose();
    return { cache, logits };
  }

  /**
   * Reads positions `start … start + slots.length` of a prompt whose earlier positions are in
   * `cache`: appends their keys and values to it and returns their logits `[slots.length, outputs]`.
   */
  #prefillChunk(slots: Int32Array, start: number, cache: SequenceCache): tf.Tensor2D {
    const { modelDimension: width, headCount: heads } = this.config;
    const headDimension = this.#headDimension;
    const length = slots.length;
    const total = start + length;
    const keys: tf.Tensor3D[] = [];
    const values: tf.Tensor3D[] = [];
    const logits = tf.tidy(() => {
      let hidden: tf.Tensor = tf.gather(this.#parameter('embedding.token'), tf.tensor1d(slots, 'int32'));
      if (this.#positions !== null) {
        hidden = hidden.add(
          tf.tensor2d(this.#positions.subarray(start * width, total * width), [length, width]),
        );
      }
      const rotation: Rotation | null =
        this.#rotary === null
          ? null
          : {
              cos: tf.tensor2d(this.#rotary.cos.subarray(start * headDimension, total * headDimension), [
                length,
                headDimension,
              ]),
              sin: tf.tensor2d(this.#rotary.sin.subarray(start * headDimension, total * headDimension), [
                length,
                headDimension,
              ]),
            };
      const mask =
        this.#alibiSlopes === null
          ? tf.tensor2d(causalMaskValues(length, start), [length, total])
          : tf.tensor3d(alibiMaskValues(length, this.#alibiSlopes, start), [heads, length, total]);
      const splitHeads = (tensor: tf.Tensor) =>
        tensor.reshape([1, length, heads, headDimension]).transpose([0, 2, 1, 3]) as tf.Tensor4D;
      for (let layer = 0; layer < this.config.layerCount; layer++) {
        const prefix = `layers.${layer}`;
        const normed = this.#layerNorm(hidden, `${prefix}.attention_norm`);
        const query = rotate(
          splitHeads(normed.matMul(this.#parameter(`${prefix}.attention.query`))),
          rotation,
        );
        const ownKey = rotate(
          splitHeads(normed.matMul(this.#parameter(`${prefix}.attention.key`))),
          rotation,
        );
        const ownValue = splitHeads(normed.matMul(this.#parameter(`${prefix}.attention.value`)));
        const earlierKeys = cache.keys[layer];
        const earlierValues = cache.values[layer];
        const key =
          earlierKeys === undefined
            ? ownKey
            : (tf.concat([earlierKeys.reshape([1, heads, start, headDimension]), ownKey], 2) as tf.Tensor4D);
        const value =
          earlierValues === undefined
            ? ownValue
            : (tf.concat(
                [earlierValues.reshape([1, heads, start, headDimension]), ownValue],
                2,
              ) as tf.Tensor4D);
        keys.push(tf.keep(key.reshape([heads, total, headDimension]) as tf.Tensor3D));
        values.push(tf.keep(value.reshape([heads, total, headDimension]) as tf.Tensor3D));
        const scores = tf.matMul(query, key, false, true).mul(this.#attentionScale).add(mask);
        const attended = tf
          .matMul(tf.softmax(scores), value)
          .transpose([0, 2, 1, 3])
          .reshape([length, width]);
        hidden = hidden.add(attended.matMul(this.#parameter(`${prefix}.attention.output`)));
        hidden = hidden.add(
          this.#feedForward(this.#layerNorm(hidden, `${prefix}.feed_forward_norm`), prefix),
        );
      }
      return this.#outputLogits(hidden);
    });
    // The cache now holds every position read so far; the previous (shorter) tensors are replaced.
    for (const tensor of cache.keys) tensor.dispose();
    for (const tensor of cache.values) tensor.dispose();
    cache.keys = keys;
    cache.values = values;
    cache.length = total;
    return logits;
  }

  /**
   * A set of sequences decoded together, whose caches are stacked into one tensor per layer so a
   * step costs the same few operations whatever the batch size. See {@link DecodeBatch}.
   */
  createDecodeBatch<TOwner>(): DecodeBatch<TOwner> {
    this.#assertLive();
    return new DecodeBatch<TOwner>(this.config, (input) => this.#stackedStep(input), this.#alibiSlopes);
  }

  #stackedStep(input: StackedStepInput): StackedStepOutput {
    this.#assertLive();
    const { modelDimension: width, headCount: heads } = this.config;
    const headDimension = this.#headDimension;
    const rows = input.slots.length;
    const columns = input.columns + 1;
    const keys: tf.Tensor4D[] = [];
    const values: tf.Tensor4D[] = [];
    const logits = tf.tidy(() => {
      let hidden: tf.Tensor = tf.gather(
        this.#parameter('embedding.token'),
        tf.tensor1d(input.slots, 'int32'),
      );
      if (this.#positions !== null) {
        hidden = hidden.add(tf.tensor2d(tableRows(this.#positions, input.positions, width), [rows, width]));
      }
      const rotation =
        this.#rotary === null
          ? null
          : {
              cos: tf.tensor4d(tableRows(this.#rotary.cos, input.positions, headDimension), [
                rows,
                1,
                1,
                headDimension,
              ]),
              sin: tf.tensor4d(tableRows(this.#rotary.sin, input.positions, headDimension), [
                rows,
                1,
                1,
                headDimension,
              ]),
            };
      const maskHeads = this.#alibiSlopes === null ? 1 : heads;
      const mask = tf.tensor4d(input.mask, [rows, maskHeads, 1, columns]);
      for (let layer = 0; layer < this.config.layerCount; layer++) {
        const prefix = `layers.${layer}`;
        const normed = this.#layerNorm(hidden, `${prefix}.attention_norm`);
        const project = (name: string) =>
          normed
            .matMul(this.#parameter(`${prefix}.attention.${name}`))
            .reshape([rows, heads, 1, headDimension]) as tf.Tensor4D;
        const query = rotate(project('query'), rotation);
        // Every row appends its new position as the same last column (keys cached already rotated).
        const key = tf.keep(concatColumn(input.keys[layer], rotate(project('key'), rotation)));
        const value = tf.keep(concatColumn(input.values[layer], project('value')));
        keys.push(key);
        values.push(value);
        const scores = tf.matMul(query, key, false, true).mul(this.#attentionScale).add(mask);
        const attended = tf.matMul(tf.softmax(scores), value).reshape([rows, width]);
        hidden = hidden.add(attended.matMul(this.#parameter(`${prefix}.attention.output`)));
        hidden = hidden.add(
          this.#feedForward(this.#layerNorm(hidden, `${prefix}.feed_forward_norm`), prefix),
        );
      }
      return this.#outputLogits(hidden) as tf.Tensor2D;
    });
    return { logits, keys, values };
  }

  /**
   * Next-token logits `[batch, outputs]` by recomputing the whole prefix (equal-length rows). The
   * no-cache baseline of the benchmark.
   */
  lastLogitsWithoutCache(slots: tf.Tensor2D): tf.Tensor2D {
    this.#assertLive();
    return tf.tidy(() => {
      const [batch, length] = slots.shape;
      const all = this.#forwardPass(slots, false);
      return all
        .slice([0, length - 1, 0], [batch, 1, -1])
        .reshape([batch, this.vocabulary.outputCount]) as tf.Tensor2D;
    });
  }

  #forwardPass(
    inputSlots: tf.Tensor2D,
    differentiable: boolean,
    chunkLength = defaultAttentionChunkLength,
  ): tf.Tensor3D {
    const { modelDimension: width, headCount: heads } = this.config;
    const headDimension = this.#headDimension;
    const [batch, length] = inputSlots.shape;
    if (length > this.config.contextLength) {
      throw new DressageError({
        code: 'out_of_range',
        message: `${length} positions exceed the context length (${this.config.contextLength})`,
      });
    }
    const flatSlots = inputSlots.reshape([batch * length]) as tf.Tensor1D;
    const embedding = this.#parameter('embedding.token');
    const product = differentiable ? differentiableProduct : plainProduct;
    const embedded = differentiable
      ? product(tf.oneHot(flatSlots, this.vocabulary.slotCount).toFloat() as tf.Tensor2D, embedding)
      : tf.gather(embedding, flatSlots);
    let hidden: tf.Tensor = embedded;
    if (this.#positions !== null) {
      const positions = tf.tensor2d(this.#positions.subarray(0, length * width), [length, width]);
      hidden = embedded
        .reshape([batch, length, width])
        .add(positions)
        .reshape([batch * length, width]);
    }
    const rotation: Rotation | null =
      this.#rotary === null
        ? null
        : {
            cos: tf.tensor2d(this.#rotary.cos.subarray(0, length * headDimension), [length, headDimension]),
            sin: tf.tensor2d(this.#rotary.sin.subarray(0, length * headDimension), [length, headDimension]),
          };
    const splitHeads = (tensor: tf.Tensor) =>
      tensor.reshape([batch, length, heads, headDimension]).transpose([0, 2, 1, 3]) as tf.Tensor4D;
    for (let layer = 0; layer < this.config.layerCount; layer++) {
      const prefix = `layers.${layer}`;
      const normed = this.#layerNorm(hidden, `${prefix}.attention_norm`);
      const project = (name: string) => product(normed, this.#parameter(`${prefix}.attention.${name}`));
      const query = rotate(splitHeads(project('query')), rotation);
      const key = rotate(splitHeads(project('key')), rotation);
      const value = splitHeads(project('value'));
      const attended = this.#causalAttention(query, key, value, differentiable, chunkLength)
        .transpose([0, 2, 1, 3])
        .reshape([batch * length, width]) as tf.Tensor2D;
      hidden = hidden.add(product(attended, this.#parameter(`${prefix}.attention.output`)));
      hidden = hidden.add(
        this.#feedForward(this.#layerNorm(hidden, `${prefix}.feed_forward_norm`), prefix, product),
      );
    }
    return this.#outputLogits(hidden, product).reshape([batch, length, this.vocabulary.outputCount]);
  }

  /**
   * Causal self-attention of `[batch, heads, length, headDimension]` queries, keys and values
   * (queries and keys rotated). Up to `chunkLength` positions: one pass. Longer: the
   * queries attend in chunks of that many, each to the keys up to its last position, so a step holds
   * `heads × chunk × length` scores, not `heads × length²` (a 16K-token sequence in one pass needs
   * gigabytes, past what the wasm backend can address). Differentiated, the chunks' scores are not
   * kept for the backward pass but recomputed there, chunk by chunk.
   */
  #causalAttention(
    query: tf.Tensor4D,
    key: tf.Tensor4D,
    value: tf.Tensor4D,
    differentiable: boolean,
    chunkLength: number,
  ): tf.Tensor4D {
    const length = query.shape[2];
    if (length <= chunkLength) {
      const scores = tf
        .matMul(query, key, false, true)
        .mul(this.#attentionScale)
        .add(this.#causalMask(length, 0));
      return tf.matMul(tf.softmax(scores), value) as tf.Tensor4D;
    }
    if (!differentiable) return this.#chunkedAttention(query, key, value, chunkLength);
    const attend = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const [q, k, v, save] = args as [tf.Tensor4D, tf.Tensor4D, tf.Tensor4D, tf.GradSaveFunc];
      save([q, k, v]);
      return {
        value: this.#chunkedAttention(q, k, v, chunkLength),
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) =>
          this.#chunkedAttentionGradients(
            dy as tf.Tensor4D,
            saved as [tf.Tensor4D, tf.Tensor4D, tf.Tensor4D],
            chunkLength,
          ),
      };
    });
    return attend(query, key, value) as tf.Tensor4D;
  }

  // The additive mask of the queries at positions `start … start + rows − 1` over the keys up to
  // the last of them: `[rows, start + rows]`, or `[heads, rows, start + rows]` with ALiBi.
  #causalMask(rows: number, start: number): tf.Tensor {
    const columns = start + rows;
    return this.#alibiSlopes === null
      ? tf.tensor2d(causalMaskValues(rows, start), [rows, columns])
      : tf.tensor3d(alibiMaskValues(rows, this.#alibiSlopes, start), [
          this.#alibiSlopes.length,
          rows,
          columns,
        ]);
  }

  // Each chunk's queries, its keys and values (positions up to the chunk's end) and attention weights.
  #attentionChunk(
    query: tf.Tensor4D,
    key: tf.Tensor4D,
    value: tf.Tensor4D,
    start: number,
    end: number,
  ): { query: tf.Tensor4D; key: tf.Tensor4D; value: tf.Tensor4D; weights: tf.Tensor4D } {
    const chunkQuery = query.slice([0, 0, start, 0], [-1, -1, end - start, -1]);
    const chunkKey = key.slice([0, 0, 0, 0], [-1, -1, end, -1]);
    const chunkValue = value.slice([0, 0, 0, 0], [-1, -1, end, -1]);
    const scores = tf
      .matMul(chunkQuery, chunkKey, false, true)
      .mul(this.#attentionScale)
      .add(this.#causalMask(end - start, start));
    return {
      query: chunkQuery,
      key: chunkKey,
      value: chunkValue,
      weights: tf.softmax(scores) as tf.Tensor4D,
    };
  }

  #chunkedAttention(
    query: tf.Tensor4D,
    key: tf.Tensor4D,
    value: tf.Tensor4D,
    chunkLength: number,
  ): tf.Tensor4D {
    const length = query.shape[2];
    const outputs: tf.Tensor4D[] = [];
    for (let start = 0; start < length; start += chunkLength) {
      const end = Math.min(length, start + chunkLength);
      outputs.push(
        tf.tidy(() => {
          const chunk = this.#attentionChunk(query, key, value, start, end);
          return tf.matMul(chunk.weights, chunk.value) as tf.Tensor4D;
        }),
      );
    }
    const attended = tf.concat(outputs, 2) as tf.Tensor4D;
    for (const output of outputs) output.dispose();
    return attended;
  }

  // Softmax attention's gradients, chunk by chunk: with P the weights and dO a chunk's output
  // gradient, dV += Pᵀ·dO, dS = P ⊙ (dO·Vᵀ − rowsum(dO ⊙ O)), dQ = scale·dS·K, dK += scale·dSᵀ·Q.
  #chunkedAttentionGradients(
    dy: tf.Tensor4D,
    [query, key, value]: [tf.Tensor4D, tf.Tensor4D, tf.Tensor4D],
    chunkLength: number,
  ): tf.Tensor4D[] {
    const length = query.shape[2];
    const queryGradients: tf.Tensor4D[] = [];
    let keyGradient = tf.zerosLike(key) as tf.Tensor4D;
    let valueGradient = tf.zerosLike(value) as tf.Tensor4D;
    for (let start = 0; start < length; start += chunkLength) {
      const end = Math.min(length, start + chunkLength);
      const [dq, dk, dv] = tf.tidy(() => {
        const chunk = this.#attentionChunk(query, key, value, start, end);
        const outputGradient = dy.slice([0, 0, start, 0], [-1, -1, end - start, -1]);
        const weightGradient = tf.matMul(outputGradient, chunk.value, false, true);
        const scoreGradient = chunk.weights
          .mul(weightGradient.sub(weightGradient.mul(chunk.weights).sum(-1, true)))
          .mul(this.#attentionScale);
        const padding: [number, number][] = [
          [0, 0],
          [0, 0],
          [0, length - end],
          [0, 0],
        ];
        return [
          tf.matMul(scoreGradient, chunk.key) as tf.Tensor4D,
          tf.pad(tf.matMul(scoreGradient, chunk.query, true, false), padding) as tf.Tensor4D,
          tf.pad(tf.matMul(chunk.weights, outputGradient, true, false), padding) as tf.Tensor4D,
        ];
      });
      queryGradients.push(dq);
      const keys = keyGradient.add(dk) as tf.Tensor4D;
      const values = valueGradient.add(dv) as tf.Tensor4D;
      for (const tensor of [keyGradient, valueGradient, dk, dv]) tensor.dispose();
      keyGradient = keys;
      valueGradient = values;
    }
    const queryGradient = tf.concat(queryGradients, 2) as tf.Tensor4D;
    for (const tensor of queryGradients) tensor.dispose();
    return [queryGradient, keyGradient, valueGradient];
  }

  #layerNorm(input: tf.Tensor, prefix: string): tf.Tensor2D {
    const { mean, variance } = tf.moments(input, -1, true);
    return input
      .sub(mean)
      .mul(tf.rsqrt(variance.add(normEpsilon)))
      .mul(this.#parameter(`${prefix}.scale`))
      .add(this.#parameter(`${prefix}.bias`)) as tf.Tensor2D;
  }

  #feedForward(input: tf.Tensor2D, prefix: string, product: MatrixProduct = plainProduct): tf.Tensor2D {
    const up = tf.relu(
      product(input, this.#parameter(`${prefix}.feed_forward.up`)).add(
        this.#parameter(`${prefix}.feed_forward.up_bias`),
      ),
    ) as tf.Tensor2D;
    return product(up, this.#parameter(`${prefix}.feed_forward.down`)).add(
      this.#parameter(`${prefix}.feed_forward.down_bias`),
    );
  }

  #outputLogits(hidden: tf.Tensor, product: MatrixProduct = plainProduct): tf.Tensor2D {
    return product(this.#layerNorm(hidden, 'final_norm'), this.#parameter('output.projection')).add(
      this.#parameter('output.bias'),
    );
  }

  #parameter(name: string): tf.Tensor2D {
    return this.parameters.get(name)! as unknown as tf.Tensor2D;
  }

  #assertLive(): void {
    if (this.#disposed)
      throw new DressageError({ code: 'failed_precondition', message: 'The model was disposed' });
  }
}

/** Divides logits by a temperature (a number, or a `[rows, 1]` tensor of per-row temperatures). */
export function scaleLogits<T extends tf.Tensor>(logits: T, temperature: number | tf.Tensor): T {
  if (typeof temperature === 'number' && temperature === 1) return logits;
  return logits.div(temperature) as T;
}

/**
 * ALiBi slopes, one per head: the geometric sequence 2^(-8/heads), 2^(-16/heads), … (the first head
 * looks mostly at the last few tokens, the last one nearly evenly).
 */
function alibiSlopes(heads: number): Float64Array {
  return Float64Array.from({ length: heads }, (_, head) => 2 ** ((-8 * (head + 1)) / heads));
}

/**
 * `[heads, length, start + length]`: for the queries at positions `start …`, `-slope · distance` for
 * keys at or before the query, masked after.
 */
function alibiMaskValues(length: number, slopes: Float64Array, start = 0): Float32Array {
  const columns = start + length;
  const values = new Float32Array(slopes.length * length * columns);
  slopes.forEach((slope, head) => {
    for (let row = 0; row < length; row++) {
      const offset = (head * length + row) * columns;
      const position = start + row;
      for (let column = 0; column < columns; column++)
        values[offset + column] = column <= position ? -slope * (position - column) : maskValue;
    }
  });
  return values;
}

/** `[length, start + length]`: the causal mask of the queries at positions `start …`. */
function causalMaskValues(length: number, start = 0): Float32Array {
  const columns = start + length;
  const values = new Float32Array(length * columns);
  for (let row = 0; row < length; row++)
    values.fill(maskValue, row * columns + start + row + 1, (row + 1) * columns);
  return values;
}

function concatColumn(cache: tf.Tensor4D | undefined, column: tf.Tensor4D): tf.Tensor4D {
  return cache === undefined ? column.clone() : (tf.concat([cache, column], 2) as tf.Tensor4D);
}

function checkWeights(specs: readonly ParameterSpec[], weights: NamedWeights): void {
  const expected = new Set(specs.map((spec) => spec.name));
  for (const name of weights.keys()) {
    if (!expected.has(name)) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `Unexpected weight ${name}`,
        details: { name },
      });
    }
  }
  for (const spec of specs) {
    const values = weights.get(spec.name);
    if (values === undefined) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `Missing weight ${spec.name}`,
        details: { name: spec.name },
      });
    }
    if (values.length !== elementCount(spec.shape)) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `Weight ${spec.name} has ${values.length} values; shape [${spec.shape.join(', ')}] needs ${elementCount(spec.shape)}`,
        details: { name: spec.name, shape: spec.shape },
      });
    }
  }
}
