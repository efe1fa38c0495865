import { createHash } from 'node:crypto';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import { z } from 'zod';
import type { ParameterSpec } from '../model.js';

/** Name of the trainer state (step, rollout, optimizer layout) inside a checkpoint directory. */
export const trainerStateFile = 'embedded-trainer.json';
/** Name of the raw little-endian float32 Adam moments inside a checkpoint directory. */
export const optimizerStateFile = 'embedded-optimizer.bin';
/** Name of the raw little-endian float32 KL reference weights inside a checkpoint directory. */
export const referenceStateFile = 'embedded-reference.bin';

const stateFormat = 'dressage.embedded.trainer-state/v1';

const stateSchema = z.object({
  format: z.literal(stateFormat),
  train_steps: z.number().int().nonnegative(),
  rollout_id: z.number().int().nonnegative(),
  weight_version: z.string(),
  learning_rate: z.number().positive(),
  optimizer: z
    .object({
      iterations: z.number().int().nonnegative(),
      beta_powers: z.tuple([z.number(), z.number()]),
      // Parameter names in moment order; the binary file holds every first moment, then every second.
      parameters: z.array(z.string()),
      sha256: z.string().regex(/^[0-9a-f]{64}$/),
    })
    .nullable(),
  // The KL loss's frozen reference weights; absent in checkpoints of runs that never used it.
  reference: z
    .object({
      // Parameter names in the binary file's order.
      parameters: z.array(z.string()),
      sha256: z.string().regex(/^[0-9a-f]{64}$/),
    })
    .nullable()
    .optional(),
  // Recent policy-loss gradient norms (LossConfig.clip_grad_spike); absent when none were recorded.
  gradient_norms: z.array(z.number().positive()).optional(),
});

/** Trainer bookkeeping stored next to a model checkpoint. */
export type TrainerState = z.infer<typeof stateSchema>;

/**
 * Adam whose learning rate can follow the recipe (a Train call's `LossConfig.learning_rate`)
 * without losing its moments.
 */
export class AdjustableAdam extends tf.AdamOptimizer {
  /** The learning rate of the next step. */
  get currentLearningRate(): number {
    return this.learningRate;
  }

  set currentLearningRate(value: number) {
    this.learningRate = value;
  }

  /**
   * The running products β1^t and β2^t. Stored exactly: `setWeights` recomputes them with `pow`,
   * which can differ from the running product in the last bit and break bit-exact resumption.
   */
  get betaPowers(): [number, number] {
    const { accBeta1, accBeta2 } = this as unknown as BetaPowers;
    return [accBeta1.dataSync()[0]!, accBeta2.dataSync()[0]!];
  }

  set betaPowers([first, second]: [number, number]) {
    const { accBeta1, accBeta2 } = this as unknown as BetaPowers;
    tf.tidy(() => {
      accBeta1.assign(tf.scalar(first));
      accBeta2.assign(tf.scalar(second));
    });
  }
}

// Adam's private running products (see AdjustableAdam.betaPowers).
interface BetaPowers {
  accBeta1: tf.Variable;
  accBeta2: tf.Variable;
}

/** Creates Adam with slime's defaults (β1 0.9, β2 0.999, ε 1e-8). */
export function createAdam(learningRate: number): AdjustableAdam {
  return new AdjustableAdam(learningRate, 0.9, 0.999, 1e-8);
}

/**
 * Reads Adam's moments, in the order of `specs` (the order the trainer hands gradients over, which
 * is the order Adam keeps its slots in). Null before the first step.
 */
export async function readOptimizerMoments(
  optimizer: tf.AdamOptimizer,
  specs: readonly ParameterSpec[],
): Promise<{ iterations: number; betaPowers: [number, number]; bytes: Uint8Array } | null> {
  const weights = await optimizer.getWeights();
  const [iterations, ...moments] = weights;
  try {
    if (moments.length === 0) return null;
    if (moments.length !== specs.length * 2) {
      throw new DressageError({
        code: 'internal',
        message: `Adam holds ${moments.length} moments for ${specs.length} parameters`,
      });
    }
    const arrays = moments.map((moment) => moment.tensor.dataSync() as Float32Array);
    const total = arrays.reduce((sum, values) => sum + values.length, 0);
    const bytes = new Uint8Array(total * 4);
    let offset = 0;
    for (const values of arrays) {
      bytes.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength), offset);
      offset += values.byteLength;
    }
    const betaPowers =
      optimizer instanceof AdjustableAdam ? optimizer.betaPowers : ([0.9, 0.999] as [number, number]);
    return { iterations: iterations!.tensor.dataSync()[0]!, betaPowers, bytes };
  } finally {
    iterations?.tensor.dispose();
  }
}

/** Weights as one raw float32 buffer, in the order of `specs`. */
export function packWeights(
  weights: ReadonlyMap<string, Float32Array>,
  specs: readonly ParameterSpec[],
): Uint8Array {
  const arrays = specs.map((spec) => weights.get(spec.name)!);
  const bytes = new Uint8Array(arrays.reduce((sum, values) => sum + values.byteLength, 0));
  let offset = 0;
  for (const values of arrays) {
    bytes.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength), offset);
    offset += values.byteLength;
  }
  return bytes;
}

/**
 * Weights stored by {@link packWeights}, by parameter name.
 * @throws DressageError `failed_precondition` when they are for other parameters.
 */
export function unpackWeights(
  values: Float32Array,
  parameters: readonly string[],
  specs: readonly ParameterSpec[],
): Map<string, Float32Array> {
  const sizes = specs.map((spec) => spec.shape.reduce((product, size) => product * size, 1));
  if (
    parameters.join('\n') !== specs.map((spec) => spec.name).join('\n') ||
    values.length !== sizes.reduce((sum, size) => sum + size, 0)
  ) {
    throw new DressageError({
      code: 'failed_precondition',
      message: 'The stored KL reference weights are for a different model',
    });
  }
  const weights = new Map<string, Float32Array>();
  let offset = 0;
  specs.forEach((spec, index) => {
    weights.set(spec.name, values.slice(offset, offset + sizes[index]!));
    offset += sizes[index]!;
  });
  return weights;
}

async function writeAtomically(path: string, data: Uint8Array | string): Promise<void> {
  await writeFile(`${path}.tmp`, data);
  await rename(`${path}.tmp`, path);
}

/**
 * Writes the trainer state (and the optimizer moments and KL reference weights, when any) into a
 * checkpoint directory.
 */
export async function writeTrainerState(
  directory: string,
  state: Omit<TrainerState, 'format' | 'optimizer' | 'reference'>,
  optimizer: {
    iterations: number;
    betaPowers: [number, number];
    parameters: string[];
    bytes: Uint8Array;
  } | null,
  reference: { parameters: string[]; bytes: Uint8Array } | null = null,
): Promise<number> {
  const { gradient_norms: norms, ...rest } = state;
  const manifest: TrainerState = {
    format: stateFormat,
    ...rest,
    // Only when recorded, so a checkpoint of supervised steps alone keeps its bytes.
    ...(norms === undefined || norms.length === 0 ? {} : { gradient_norms: norms }),
    optimizer:
      optimizer === null
        ? null
        : {
            iterations: optimizer.iterations,
            beta_powers: optimizer.betaPowers,
            parameters: optimizer.parameters,
            sha256: createHash('sha256').update(optimizer.bytes).digest('hex'),
          },
    reference:
      reference === null
        ? null
        : {
            parameters: reference.parameters,
            sha256: createHash('sha256').update(reference.bytes).digest('hex'),
          },
  };
  const text = `${JSON.stringify(manifest, null, 2)}\n`;
  if (optimizer !== null) await writeAtomically(join(directory, optimizerStateFile), optimizer.bytes);
  if (reference !== null) await writeAtomically(join(directory, referenceStateFile), reference.bytes);
  // The manifest last: it names the hashes of what was written before it.
  await writeAtomically(join(directory, trainerStateFile), text);
  return Buffer.byteLength(text) + (optimizer?.bytes.byteLength ?? 0) + (reference?.bytes.byteLength ?? 0);
}

// A raw float32 file checked against the hash the manifest holds.
async function readHashedFloats(directory: string, file: string, sha256: string, what: string) {
  const bytes = await readFile(join(directory, file));
  if (createHash('sha256').update(bytes).digest('hex') !== sha256) {
    throw new DressageError({
      code: 'data_loss',
      message: `${what} in ${directory} does not match its SHA-256`,
      details: { path: directory, file },
    });
  }
  const values = new Float32Array(bytes.byteLength / 4);
  new Uint8Array(values.buffer).set(bytes);
  return values;
}

/**
 * Reads the trainer state of a checkpoint, or null when the directory holds only a model (a
 * checkpoint written by `saveCheckpoint`, or by an engine).
 * @throws DressageError `data_loss` when the optimizer moments or KL reference weights do not match
 * their hash.
 */
export async function readTrainerState(directory: string): Promise<{
  state: TrainerState;
  moments: Float32Array | null;
  reference: Float32Array | null;
} | null> {
  let text: string;
  try {
    text = await readFile(join(directory, trainerStateFile), 'utf8');
  } catch {
    return null;
  }
  let state: TrainerState;
  try {
    state = stateSchema.parse(JSON.parse(text));
  } catch (error) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Malformed trainer state in ${directory}: ${(error as Error).message}`,
      cause: error,
      details: { path: directory },
    });
  }
  const moments =
    state.optimizer === null
      ? null
      : await readHashedFloats(directory, optimizerStateFile, state.optimizer.sha256, 'Optimizer state');
  const storedReference = state.reference ?? null;
  const reference =
    storedReference === null
      ? null
      : await readHashedFloats(
          directory,
          referenceStateFile,
          storedReference.sha256,
          'The KL reference weights',
        );
  return { state, moments, reference };
}

/**
 * A fresh Adam holding stored moments for `variables` (in `specs` order).
 * @throws DressageError `failed_precondition` when the stored moments are for other parameters.
 */
export async function restoreAdam(
  learningRate: number,
  state: NonNullable<TrainerState['optimizer']>,
  moments: Float32Array,
  specs: readonly ParameterSpec[],
  variables: readonly tf.Variable[],
): Promise<AdjustableAdam> {
  const sizes = specs.map((spec) => spec.shape.reduce((product, size) => product * size, 1));
  const expected = sizes.reduce((sum, size) => sum + size, 0) * 2;
  if (
    state.parameters.join('\n') !== specs.map((spec) => spec.name).join('\n') ||
    moments.length !== expected
  ) {
    throw new DressageError({
      code: 'failed_precondition',
      message: 'The stored optimizer state is for a different model',
    });
  }
  const optimizer = createAdam(learningRate);
  const tensors: Array<{ name: string; tensor: tf.Tensor }> = [
    { name: 'iter', tensor: tf.scalar(state.iterations, 'int32') },
  ];
  let offset = 0;
  for (const suffix of ['m', 'v']) {
    specs.forEach((spec, index) => {
      const size = sizes[index]!;
      tensors.push({
        name: `${variables[index]!.name}/${suffix}`,
        tensor: tf.tensor(moments.subarray(offset, offset + size), spec.shape),
      });
      offset += size;
    });
  }
  try {
    await optimizer.setWeights(tensors);
    optimizer.betaPowers = state.beta_powers;
  } finally {
    for (const { tensor } of tensors) tensor.dispose();
  }
  return optimizer;
}
