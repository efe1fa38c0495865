import { describe, expect, it } from 'vitest';
import { sglangGenerateRequestSchema, sglangGenerateResponseSchema } from './sglang-generate.js';

// An answer in the shape SGLang's tokenizer manager returns for `return_logprob` with ids in
// (python/sglang/srt/managers/tokenizer_manager.py: text, output_ids, meta_info).
const answer = {
  text: 'Hi.',
  output_ids: [13048, 13, 151645],
  meta_info: {
    id: 'rid-1',
    finish_reason: { type: 'stop', matched: 151645 },
    prompt_tokens: 9,
    completion_tokens: 3,
    cached_tokens: 0,
    weight_version: 'default',
    e2e_latency: 0.05,
    output_token_logprobs: [
      [-0.25, 13048, null],
      [-0.5, 13, null],
      [null, 151645, null],
    ],
  },
};

describe('SGLang /generate', () => {
  it("accepts SGLang's answer and the older string finish reason and `version`", () => {
    expect(sglangGenerateResponseSchema.parse(answer).meta_info?.output_token_logprobs?.[2]).toEqual([
      null,
      151645,
      null,
    ]);
    const older = { ...answer, meta_info: { finish_reason: 'length', version: 3 } };
    expect(sglangGenerateResponseSchema.parse(older).meta_info?.finish_reason).toBe('length');
  });

  it('names the field of a token array that is not one', () => {
    const badIds = sglangGenerateResponseSchema.safeParse({ ...answer, output_ids: [1, -2] });
    expect(badIds.success ? [] : badIds.error.issues.map((issue) => issue.path.join('.'))).toEqual([
      'output_ids',
    ]);
    const badEntry = sglangGenerateResponseSchema.safeParse({
      ...answer,
      meta_info: { ...answer.meta_info, output_token_logprobs: [[-0.1, 'x', null]] },
    });
    expect(badEntry.success ? [] : badEntry.error.issues.map((issue) => issue.path.join('.'))).toEqual([
      'meta_info.output_token_logprobs',
    ]);
  });

  it('takes the request the proxy sends, and refuses a top_k that keeps no token', () => {
    const request = {
      input_ids: [1, 2, 3],
      sampling_params: { temperature: 1, top_p: 1, top_k: -1, max_new_tokens: 16 },
      return_logprob: true,
      logprob_start_len: -1,
      return_text_in_logprobs: true,
      rid: 'r1',
    };
    expect(sglangGenerateRequestSchema.parse(request).rid).toBe('r1');
    const bad = sglangGenerateRequestSchema.safeParse({ ...request, sampling_params: { top_k: 0 } });
    expect(bad.success ? [] : bad.error.issues.map((issue) => issue.path.join('.'))).toEqual([
      'sampling_params.top_k',
    ]);
  });
});
