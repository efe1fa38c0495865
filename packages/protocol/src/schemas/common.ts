import { z } from 'zod';

/** A token id: a non-negative 32-bit integer. */
export const tokenIdSchema = z.int().nonnegative().max(2147483647);

/** A list of token ids as JSON carries it. */
export const tokenIdsSchema = z.array(tokenIdSchema);

/** A loss-mask entry: 1 = trainable (model output), 0 = context. */
export const maskValueSchema = z.union([z.literal(0), z.literal(1)]);

/** Per-token logprobs as JSON carries them (context tokens hold 0.0). */
export const logprobsSchema = z.array(z.number());

/** Any JSON object with string keys. */
export const jsonObjectSchema = z.record(z.string(), z.unknown());

/** A chunk of routed-expert ids (MoE routing replay), base64 of a packed array. */
export const routedExpertsChunkSchema = z.looseObject({
  data: z.string(),
  row_count: z.int().nonnegative(),
  dtype: z.enum(['int32', 'uint16', 'uint8']),
});

/** A chunk of routed-expert ids (MoE routing replay), base64 of a packed array. */
export type RoutedExpertsChunk = z.infer<typeof routedExpertsChunkSchema>;

/** Adds an issue at `path` when `actual !== expected`, naming both lengths. */
export function checkLength(
  context: z.core.$RefinementCtx,
  path: PropertyKey[],
  actual: number,
  expected: number,
  against: string,
): void {
  if (actual !== expected) {
    context.addIssue({
      code: 'custom',
      path,
      message: `has ${actual} entries but ${against} has ${expected}`,
    });
  }
}
