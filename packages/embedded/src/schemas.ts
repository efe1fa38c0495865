import { z } from 'zod';

const tokenId = z.number().int().nonnegative();

/** `sampling_params` of `/generate`: the keys the embedded engine honours (others are ignored). */
export const samplingParamsSchema = z.object({
  temperature: z.number().nonnegative().optional(),
  top_p: z.number().gt(0).lte(1).optional(),
  top_k: z
    .number()
    .int()
    .refine((value) => value === -1 || value >= 1, 'top_k must be -1 (disabled) or at least 1')
    .optional(),
  max_new_tokens: z.number().int().nonnegative().nullable().optional(),
  stop: z
    .union([z.string(), z.array(z.string())])
    .nullable()
    .optional(),
  stop_token_ids: z.array(tokenId).nullable().optional(),
  ignore_eos: z.boolean().optional(),
  skip_special_tokens: z.boolean().optional(),
  no_stop_trim: z.boolean().optional(),
  spaces_between_special_tokens: z.boolean().optional(),
  sampling_seed: z.number().int().nullable().optional(),
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

/** The body of `POST /generate` (SGLang's `GenerateReqInput`, the single-request subset). */
export const generateRequestSchema = z
  .object({
    input_ids: z.array(tokenId).optional(),
    text: z.string().optional(),
    sampling_params: samplingParamsSchema.nullable().optional(),
    return_logprob: z.boolean().optional(),
    logprob_start_len: z.number().int().gte(-1).optional(),
    return_text_in_logprobs: z.boolean().optional(),
    rid: z.string().min(1).optional(),
    stream: z.boolean().optional(),
  })
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
export const pauseRequestSchema = z.object({
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
