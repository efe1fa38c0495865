// The proxy's own SGLang client against the embedded server: the "one code path" promise.
import { EngineClient } from '@dressage/proxy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatPrompt, type EmbeddedFixture, startFixture, waitFor } from './__fixtures__/embedded-fixture.js';

let fixture: EmbeddedFixture;
let client: EngineClient;
let prompt: Int32Array;

beforeAll(async () => {
  fixture = await startFixture();
  client = new EngineClient({ routerUrl: fixture.server.url });
  prompt = Int32Array.from(fixture.tokenizer.encode(chatPrompt('What is 12 + 30? Use the calculator.')));
});

afterAll(async () => {
  await client.close();
  await fixture.close();
});

function request(rid: string, maxNewTokens: number) {
  return {
    input_ids: prompt,
    sampling_params: {
      temperature: 1,
      top_p: 1,
      top_k: -1,
      max_new_tokens: maxNewTokens,
      skip_special_tokens: false,
      no_stop_trim: true,
      spaces_between_special_tokens: false,
      ignore_eos: true,
    },
    return_logprob: true as const,
    logprob_start_len: -1,
    return_text_in_logprobs: true as const,
    rid,
  };
}

describe('the proxy EngineClient against the embedded engine', () => {
  it('generates with ids, logprobs, weight version and finish reason', async () => {
    const result = await client.generate(request('proxy-1', 6), { routingKey: 'session-1' });
    expect(result.outputIds).toHaveLength(6);
    expect(result.outputLogprobs).toHaveLength(6);
    expect(result.weightVersion).toBe(fixture.engine.weightVersion);
    expect(result.finishReason).toBe('length');
    expect(result.text).toBe(fixture.tokenizer.decode(result.outputIds!));
    const [reference] = fixture.model.sequenceLogprobs([[...prompt, ...result.outputIds!]]);
    const recomputed = reference!.slice(prompt.length - 1);
    result.outputLogprobs.forEach((value, index) => {
      expect(Math.abs(value - recomputed[index]!)).toBeLessThan(1e-4);
    });
    expect(await client.workerWeightVersions()).toEqual([fixture.engine.weightVersion]);
  });

  it('aborts by rid through the /workers listing; the generate call returns the partial output', async () => {
    const steps = fixture.engine.statistics.decodeSteps;
    const pending = client.generate(request('proxy-abort', 200), { routingKey: 'session-2' });
    await waitFor(() => fixture.engine.statistics.decodeSteps >= steps + 4);
    const outcome = await client.abort('proxy-abort');
    expect(outcome).toEqual({ rid: 'proxy-abort', succeeded: true, error: null });
    const result = await pending;
    expect(result.finishReason).toBe('abort');
    expect(result.outputIds!.length).toBeGreaterThan(0);
    expect(result.outputIds!.length).toBeLessThan(200);
    expect(result.outputLogprobs).toHaveLength(result.outputIds!.length);
  });
});
