import { DressageError } from '@dressage/protocol';
import { z } from 'zod';

/** Shape and seed of the embedded causal transformer. */
export interface ModelConfig {
  /** Width of the residual stream (d_model). */
  modelDimension: number;
  /** Transformer blocks. */
  layerCount: number;
  /** Attention heads; must divide `modelDimension`. */
  headCount: number;
  /** Hidden width of each feed-forward block. */
  feedForwardDimension: number;
  /** Longest sequence (prompt plus output) the model reads. */
  contextLength: number;
  /** Seed of the deterministic initialization. */
  seed: number;
  /**
   * How positions enter the model: `alibi` biases every head's attention toward recent tokens, each
   * head by its own fixed slope (a tiny model then finds a token a few positions back without
   * searching a long prompt); `rotary` rotates queries and keys by their position (attention sees
   * relative offsets); `sinusoidal` adds a fixed table to the token embeddings.
   */
  positionEncoding: PositionEncoding;
  /**
   * Scale of the random initialization: `fan_in` draws each matrix with standard deviation
   * 1/sqrt(rows) and token embeddings with 1 (a small model's attention starts far enough from
   * uniform to learn which token to copy within a few hundred steps); `small` draws everything
   * with 0.02, as GPT-2 does for much wider models.
   */
  initialization: Initialization;
}

/** How weights are initialized (see {@link ModelConfig.initialization}). */
export type Initialization = 'fan_in' | 'small';

/** How the model encodes positions (see {@link ModelConfig.positionEncoding}). */
export type PositionEncoding = 'alibi' | 'rotary' | 'sinusoidal';

/** The default shape: small enough to train on two CPU cores, wide enough for tool-call recipes. */
export const defaultModelConfig: Readonly<ModelConfig> = {
  modelDimension: 64,
  layerCount: 2,
  headCount: 4,
  feedForwardDimension: 256,
  contextLength: 512,
  seed: 1,
  positionEncoding: 'rotary',
  initialization: 'fan_in',
};

const positiveInteger = z.number().int().positive();

/** The zod schema of a {@link ModelConfig} (as stored in a checkpoint). */
export const modelConfigSchema = z
  .object({
    modelDimension: positiveInteger.max(4096),
    layerCount: positiveInteger.max(64),
    headCount: positiveInteger.max(64),
    feedForwardDimension: positiveInteger.max(16384),
    contextLength: positiveInteger.max(65536),
    seed: z.number().int(),
    // Checkpoints written before the choice existed used sinusoidal positions.
    positionEncoding: z.enum(['alibi', 'rotary', 'sinusoidal']).default('sinusoidal'),
    initialization: z.enum(['fan_in', 'small']).default('small'),
  })
  .refine((config) => config.modelDimension % config.headCount === 0, {
    message: 'headCount must divide modelDimension',
    path: ['headCount'],
  })
  .refine(
    (config) => config.positionEncoding !== 'rotary' || (config.modelDimension / config.headCount) % 2 === 0,
    {
      message: 'rotary positions need an even head width',
      path: ['positionEncoding'],
    },
  );

/**
 * Completes a partial config with {@link defaultModelConfig} and validates it.
 * @throws DressageError `invalid_argument` for a malformed shape.
 */
export function resolveModelConfig(config: Partial<ModelConfig> = {}): ModelConfig {
  const merged = { ...defaultModelConfig, ...config };
  const parsed = modelConfigSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new DressageError({
      code: 'invalid_argument',
      message: `Invalid model config: ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`,
      details: { config: merged },
    });
  }
  return parsed.data;
}
