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
}

/** The default shape: small enough to train on two CPU cores, wide enough for tool-call recipes. */
export const defaultModelConfig: Readonly<ModelConfig> = {
  modelDimension: 64,
  layerCount: 2,
  headCount: 4,
  feedForwardDimension: 256,
  contextLength: 512,
  seed: 1,
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
  })
  .refine((config) => config.modelDimension % config.headCount === 0, {
    message: 'headCount must divide modelDimension',
    path: ['headCount'],
  });

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
