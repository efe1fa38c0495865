import { sglangGenerateRequestSchema, sglangSamplingParamsSchema } from '@dressage/protocol';
import { z } from 'zod';

/**
 * `sampling_params` of `/generate` as the embedded engine takes them: protocol's SGLang sampling
 * params, refusing the penalties and minimum length it does not implement (other keys are ignored).
 */
export const samplingParamsSchema = sglangSamplingParamsSchema.extend({
  min_new_tokens: z.literal(0, 'min_new_tokens is not supported by the embedded engine (only 0)').optional(),
  repetition_penalty: z
    .literal(1, 'repetition_penalty is not supported by the embedded engine (only 1)')
    .optional(),
  frequency_penalty: z
    .literal(0, 'frequency_penalty is not supported by the embedded engine (only 0)')
    .optional(),
  presence_penalty: z
    .literal(0, 'presence_penalty is not supported by the embedded engine (only 0)')
    .optional(),
});

/** The body of `POST /generate` as the embedded engine takes it: protocol's SGLang request, ids or text. */
export const generateRequestSchema = sglangGenerateRequestSchema
  .extend({ sampling_params: samplingParamsSchema.nullable().optional() })
  .refine((body) => (body.input_ids === undefined) !== (body.text === undefined), {
    message: 'Give exactly one of input_ids (a flat list of token ids) or text',
    path: ['input_ids'],
  });

/** A parsed `/generate` body. */
export type GenerateRequestBody = z.infer<typeof generateRequestSchema>;

/** The body of `POST /abort_request`. */
export const abortRequestSchema = z
  .object({ rid: z.string().optional(), abort_all: z.boolean().optional() })
  .refine((body) => body.abort_all === true || (body.rid !== undefined && body.rid !== ''), {
    message: 'Give a rid or abort_all: true',
    path: ['rid'],
  });

/** The body of `POST /pause_generation`. */
export const pauseGenerationRequestSchema = z.object({
  mode: z.enum(['abort', 'retract', 'in_place']).optional(),
});

/** The body of `POST /update_weights_from_disk`. */
export const updateWeightsRequestSchema = z.object({
  model_path: z.string().min(1),
  load_format: z.string().nullable().optional(),
  weight_version: z.union([z.string(), z.number()]).nullable().optional(),
  abort_all_requests: z.boolean().optional(),
  flush_cache: z.boolean().optional(),
});
