import { createHash, randomUUID } from 'node:crypto';
import { copyFile, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { hostIsLittleEndian } from '@dressage/protocol/internal';
import { z } from 'zod';
import { CausalLanguageModel, type NamedWeights, parameterSpecs } from './model.js';
import { type ModelConfig, modelConfigSchema } from './model-config.js';
import { decodeSafetensors, encodeSafetensors } from './safetensors.js';
import { TokenVocabulary } from './vocabulary.js';

/** Name of the manifest inside a checkpoint directory. */
export const checkpointManifestFile = 'embedded-model.json';
/** Name of the weights (safetensors, float32, named as the model's parameters) inside a checkpoint directory. */
export const checkpointSafetensorsFile = 'model.safetensors';
/** Name of the raw little-endian float32 weights of checkpoints written before safetensors (still read). */
export const checkpointWeightsFile = 'embedded-weights.bin';

const checkpointFormat = 'dressage.embedded.checkpoint/v2';
const legacyCheckpointFormat = 'dressage.embedded.checkpoint/v1';
const tokenizerFiles = ['tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja'] as const;

const manifestFields = {
  model: modelConfigSchema,
  vocabulary: z.array(z.number().int().nonnegative()).min(1),
  weight_version: z.string(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
};
const manifestSchema = z.discriminatedUnion('format', [
  z.object({
    format: z.literal(checkpointFormat),
    ...manifestFields,
    weights_file: z.literal(checkpointSafetensorsFile),
  }),
  z.object({
    format: z.literal(legacyCheckpointFormat),
    ...manifestFields,
    tensors: z.array(
      z.object({
        name: z.string(),
        shape: z.array(z.number().int().nonnegative()),
        offset: z.number().int().nonnegative(),
        length: z.number().int().nonnegative(),
      }),
    ),
  }),
]);

/** What a checkpoint holds. */
export interface Checkpoint {
  config: ModelConfig;
  vocabulary: TokenVocabulary;
  weights: Map<string, Float32Array>;
  weightVersion: string;
}

/** Options of {@link saveCheckpoint}. */
export interface SaveCheckpointOptions {
  /** Stored as the checkpoint's weight version. Default `default`. */
  weightVersion?: string;
  /**
   * A model directory whose tokenizer files (`tokenizer.json`, `tokenizer_config.json`,
   * `chat_template.jinja` when present) are copied in, so the checkpoint is a self-contained model
   * directory that `loadTokenizer` reads too.
   */
  tokenizerDirectory?: string;
}

function assertLittleEndian(): void {
  if (!hostIsLittleEndian) {
    throw new DressageError({ code: 'unimplemented', message: 'Checkpoints need a little-endian host' });
  }
}

/**
 * Writes a model's config, vocabulary and weights to a directory: the weights as
 * `model.safetensors` (float32, bit-exact, named as the model's parameters, so PyTorch and the
 * Megatron worker's torch actor read them), the rest in the manifest with the file's SHA-256. Both
 * files are written under temporary names and renamed, the manifest last, so a reader
 * (`/update_weights_from_disk`) never sees half a checkpoint.
 */
export async function saveCheckpoint(
  directory: string,
  model: CausalLanguageModel,
  options: SaveCheckpointOptions = {},
): Promise<void> {
  await mkdir(directory, { recursive: true });
  const weights = model.getWeights();
  const bytes = encodeSafetensors(
    model.specs.map((spec) => ({ name: spec.name, shape: spec.shape, values: weights.get(spec.name)! })),
    { format: 'pt', dressage_format: checkpointFormat },
  );
  const manifest = {
    format: checkpointFormat,
    model: model.config,
    vocabulary: Array.from(model.vocabulary.tokenIds),
    weight_version: options.weightVersion ?? 'default',
    weights_file: checkpointSafetensorsFile,
    sha256: createHash('sha256').update(bytes).digest('hex'),
  };
  if (options.tokenizerDirectory !== undefined) {
    for (const file of tokenizerFiles) {
      const source = join(options.tokenizerDirectory, file);
      const exists = await stat(source).then(
        (info) => info.isFile(),
        () => false,
      );
      if (exists) await copyFile(source, join(directory, file));
    }
  }
  const suffix = `.tmp-${randomUUID()}`;
  const weightsPath = join(directory, checkpointSafetensorsFile);
  const manifestPath = join(directory, checkpointManifestFile);
  try {
    await writeFile(weightsPath + suffix, bytes);
    await writeFile(manifestPath + suffix, `${JSON.stringify(manifest, null, 2)}\n`);
    await rename(weightsPath + suffix, weightsPath);
    await rename(manifestPath + suffix, manifestPath);
  } finally {
    await rm(weightsPath + suffix, { force: true });
    await rm(manifestPath + suffix, { force: true });
  }
}

/**
 * Reads a checkpoint written by {@link saveCheckpoint}, verifying its hash and shapes.
 * @throws DressageError `not_found` for a missing checkpoint, `data_loss` for a corrupt one,
 * `invalid_argument` for a malformed manifest.
 */
export async function loadCheckpoint(directory: string): Promise<Checkpoint> {
  assertLittleEndian();
  let manifestText: string;
  try {
    manifestText = await readFile(join(directory, checkpointManifestFile), 'utf8');
  } catch (error) {
    throw notFound(directory, error);
  }
  let parsed: z.infer<typeof manifestSchema>;
  try {
    parsed = manifestSchema.parse(JSON.parse(manifestText));
  } catch (error) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Malformed checkpoint manifest in ${directory}: ${(error as Error).message}`,
      cause: error,
      details: { path: directory },
    });
  }
  const weightsPath = join(
    directory,
    parsed.format === checkpointFormat ? checkpointSafetensorsFile : checkpointWeightsFile,
  );
  let bytes: Buffer;
  try {
    bytes = await readFile(weightsPath);
  } catch (error) {
    throw notFound(directory, error);
  }
  if (createHash('sha256').update(bytes).digest('hex') !== parsed.sha256) {
    throw new DressageError({
      code: 'data_loss',
      message: `Checkpoint weights in ${directory} do not match their SHA-256`,
      details: { path: directory },
    });
  }
  const vocabulary = new TokenVocabulary(parsed.vocabulary);
  const specs = parameterSpecs(parsed.model, vocabulary);
  const stored = new Map<string, { shape: number[]; values: Float32Array }>();
  if (parsed.format === checkpointFormat) {
    for (const tensor of decodeSafetensors(bytes, weightsPath).tensors) stored.set(tensor.name, tensor);
  } else {
    for (const tensor of parsed.tensors) {
      if ((tensor.offset + tensor.length) * 4 > bytes.byteLength) {
        throw new DressageError({
          code: 'data_loss',
          message: `Checkpoint tensor ${tensor.name} runs past the weights file`,
        });
      }
      // Copy into an aligned buffer: the file buffer's offset need not be a multiple of 4.
      const values = new Float32Array(tensor.length);
      new Uint8Array(values.buffer).set(
        bytes.subarray(tensor.offset * 4, (tensor.offset + tensor.length) * 4),
      );
      stored.set(tensor.name, { shape: tensor.shape, values });
    }
  }
  const weights = new Map<string, Float32Array>();
  for (const spec of specs) {
    const tensor = stored.get(spec.name);
    if (tensor === undefined || tensor.shape.join(',') !== spec.shape.join(',')) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `Checkpoint tensor ${spec.name} is missing or mis-shaped`,
        details: { path: directory, name: spec.name },
      });
    }
    weights.set(spec.name, tensor.values);
  }
  return { config: parsed.model, vocabulary, weights, weightVersion: parsed.weight_version };
}

function notFound(directory: string, error: unknown): DressageError {
  return new DressageError({
    code: 'not_found',
    message: `No embedded checkpoint in ${directory} (${(error as Error).message})`,
    cause: error,
    details: { path: directory },
  });
}

/** Loads a checkpoint as a ready model. */
export async function loadModel(
  directory: string,
): Promise<{ model: CausalLanguageModel; weightVersion: string }> {
  const checkpoint = await loadCheckpoint(directory);
  return {
    model: CausalLanguageModel.fromWeights(checkpoint.vocabulary, checkpoint.config, checkpoint.weights),
    weightVersion: checkpoint.weightVersion,
  };
}

/**
 * Loads a checkpoint's weights for a running model, checking that shape and vocabulary match.
 * @throws DressageError `failed_precondition` when the checkpoint is for another model.
 */
export async function loadWeightsFor(model: CausalLanguageModel, directory: string): Promise<Checkpoint> {
  const checkpoint = await loadCheckpoint(directory);
  // The seed only shaped the initial weights; any checkpoint of the same shape fits.
  const shapeOf = ({ seed: _seed, ...shape }: ModelConfig) => JSON.stringify(shape);
  const sameShape = shapeOf(checkpoint.config) === shapeOf(model.config);
  if (!sameShape || !checkpoint.vocabulary.equals(model.vocabulary)) {
    throw new DressageError({
      code: 'failed_precondition',
      message: `The checkpoint in ${directory} is for a different model (${sameShape ? 'vocabulary' : 'shape'} differs)`,
      details: { path: directory },
    });
  }
  return checkpoint;
}

/** True when two weight sets are bit-for-bit equal. */
export function weightsEqual(left: NamedWeights, right: NamedWeights): boolean {
  if (left.size !== right.size) return false;
  for (const [name, values] of left) {
    const other = right.get(name);
    if (other === undefined || other.length !== values.length) return false;
    const a = new Uint32Array(values.buffer, values.byteOffset, values.length);
    const b = new Uint32Array(other.buffer, other.byteOffset, other.length);
    for (let index = 0; index < a.length; index++) if (a[index] !== b[index]) return false;
  }
  return true;
}
