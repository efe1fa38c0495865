import { z } from 'zod';
import { tokenIdSchema } from './common.js';

// SGLang's `/generate` as Dressage speaks it: the embedded engine serves it and the proxy calls it.
// Fields follow SGLang's GenerateReqInput and the `meta_info` its tokenizer manager returns
// (sgl-project/sglang, python/sglang/srt/managers/io_struct.py and tokenizer_manager.py).

/** `sampling_params` of `/generate`: SGLang's keys that Dressage sends or serves; others pass. */
export const sglangSamplingParamsSchema = z.looseObject({
  temperature: z.number().nonnegative().optional(),
  top_p: z.number().gt(0).lte(1).optional(),
  top_k: z
    .int()
    .refine((value) => value === -1 || value >= 1, 'top_k must be -1 (disabled) or at least 1')
    .optional(),
  max_new_tokens: z.int().nonnegative().nullable().optional(),
  stop: z
    .union([z.string(), z.array(z.string())])
    .nullable()
    .optional(),
  stop_token_ids: z.array(tokenIdSchema).nullable().optional(),
  ignore_eos: z.boolean().optional(),
  skip_special_tokens: z.boolean().optional(),
  no_stop_trim: z.boolean().optional(),
  spaces_between_special_tokens: z.boolean().optional(),
  sampling_seed: z.int().nullable().optional(),
  min_new_tokens: z.int().nonnegative().optional(),
  repetition_penalty: z.number().optional(),
  frequency_penalty: z.number().optional(),
  presence_penalty: z.number().optional(),
});

/** `sampling_params` of `/generate`. */
export type SglangSamplingParams = z.infer<typeof sglangSamplingParamsSchema>;

/**
 * The body of `POST /generate`, the single-request subset of SGLang's GenerateReqInput: token ids or
 * text, sampling, logprobs (`logprob_start_len` -1: output only), the request id, streaming and the
 * routed experts of R3.
 */
export const sglangGenerateRequestSchema = z.looseObject({
  input_ids: z.array(tokenIdSchema).optional(),
  text: z.string().optional(),
  sampling_params: sglangSamplingParamsSchema.nullable().optional(),
  return_logprob: z.boolean().optional(),
  logprob_start_len: z.int().gte(-1).optional(),
  return_text_in_logprobs: z.boolean().optional(),
  rid: z.string().min(1).optional(),
  stream: z.boolean().optional(),
  return_routed_experts: z.boolean().optional(),
});

/** The body of `POST /generate`. */
export type SglangGenerateRequest = z.infer<typeof sglangGenerateRequestSchema>;

/** One logprob entry: `[logprob, token id, token text]`; the logprob is null where the engine has none. */
export type SglangLogprobEntry = [number | null, number, string | null];

// The token arrays are checked in one loop each, not element by element through zod: a response of
// thousands of tokens is decoded on the proxy's hot path.
function isTokenIdArray(value: unknown): value is number[] {
  if (!Array.isArray(value)) return false;
  for (let index = 0; index < value.length; index++) {
    const id = value[index];
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) return false;
  }
  return true;
}

function isLogprobEntries(value: unknown): value is SglangLogprobEntry[] {
  if (!Array.isArray(value)) return false;
  for (let index = 0; index < value.length; index++) {
    const entry = value[index];
    if (!Array.isArray(entry) || entry.length < 2) return false;
    const [logprob, id, text] = entry;
    if (logprob !== null && typeof logprob !== 'number') return false;
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) return false;
    if (text !== undefined && text !== null && typeof text !== 'string') return false;
  }
  return true;
}

const logprobEntriesSchema = z.custom<SglangLogprobEntry[]>(
  isLogprobEntries,
  'must be a list of [logprob or null, token id, text or null] entries',
);

/**
 * Why generation stopped: `{type: 'stop' | 'length' | 'abort', matched?, message?}`; null while a
 * stream runs. Older engines send the type alone, as a string.
 */
export const sglangFinishReasonSchema = z.union([
  z.string(),
  z.looseObject({ type: z.string(), message: z.string().nullish() }),
  z.null(),
]);

/** Why generation stopped, as the engine reports it. */
export type SglangFinishReason = z.infer<typeof sglangFinishReasonSchema>;

/** `meta_info` of a `/generate` answer: the keys Dressage reads or serves. */
export const sglangMetaInfoSchema = z.looseObject({
  id: z.string().optional(),
  finish_reason: sglangFinishReasonSchema.optional(),
  prompt_tokens: z.int().nonnegative().optional(),
  completion_tokens: z.int().nonnegative().optional(),
  cached_tokens: z.int().nonnegative().optional(),
  /** The weight version that produced the tokens (`version` in older engines). */
  weight_version: z.union([z.string(), z.number()]).nullish(),
  version: z.union([z.string(), z.number()]).nullish(),
  e2e_latency: z.number().optional(),
  output_token_logprobs: logprobEntriesSchema.optional(),
  input_token_logprobs: logprobEntriesSchema.optional(),
  /** Base64 of the routed experts' ids (little-endian int32), with R3. */
  routed_experts: z.string().nullish(),
  routed_experts_start_len: z.number().nonnegative().nullish(),
});

/** `meta_info` of a `/generate` answer. */
export type SglangMetaInfo = z.infer<typeof sglangMetaInfoSchema>;

/** The answer of `POST /generate` (and each event of its stream): the text, the output ids, `meta_info`. */
export const sglangGenerateResponseSchema = z.looseObject({
  text: z.string().optional(),
  output_ids: z
    .custom<number[]>(isTokenIdArray, 'must be a list of token ids (whole numbers, at least 0)')
    .optional(),
  meta_info: sglangMetaInfoSchema.optional(),
});

/** The answer of `POST /generate`. */
export type SglangGenerateResponse = z.infer<typeof sglangGenerateResponseSchema>;
