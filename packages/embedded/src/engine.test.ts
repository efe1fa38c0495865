import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { smallConfig, testVocabulary, waitFor } from './__fixtures__/embedded-fixture.js';
import { initializeBackend } from './backend.js';
import { defaultSampling, type GenerationRequest, InferenceEngine } from './engine.js';
import { CausalLanguageModel } from './model.js';
import type { TokenVocabulary } from './vocabulary.js';

let vocabulary: TokenVocabulary;
let model: CausalLanguageModel;

beforeAll(async () => {
  await initializeBackend();
  vocabulary = await testVocabulary();
  model = CausalLanguageModel.create(vocabulary, smallConfig);
});

afterAll(() => {
  model.dispose();
});

function request(rid: string, maxNewTokens: number, seed = 1): GenerationRequest {
  return {
    rid,
    inputIds: Array.from(vocabulary.tokenIds.slice(3, 15)),
    logprobStartLength: -1,
    sampling: { ...defaultSampling, maxNewTokens, seed, ignoreEos: true },
  };
}

describe('InferenceEngine', () => {
  it('queues requests beyond the batch limit and runs them all', async () => {
    const engine = new InferenceEngine({ model, maxBatchSize: 2 });
    const results = await Promise.all(
      [1, 2, 3, 4, 5].map((seed) => engine.generate(request(`r${seed}`, 6, seed))),
    );
    expect(results.map((result) => result.outputIds.length)).toEqual([6, 6, 6, 6, 6]);
    expect(engine.statistics.largestBatch).toBe(2);
    expect(engine.statistics.completedRequests).toBe(5);
  });

  it('aborts a queued request before it starts and refuses duplicate ids', async () => {
    const engine = new InferenceEngine({ model, maxBatchSize: 1 });
    const first = engine.generate(request('first', 30));
    const queued = engine.generate(request('queued', 30));
    expect(() => engine.generate(request('queued', 3))).toThrow(
      expect.objectContaining({ code: 'invalid_argument' }),
    );
    expect(engine.requestIds().sort()).toEqual(['first', 'queued']);
    expect(engine.abort('queued')).toBe(true);
    expect(engine.abort('nobody')).toBe(false);
    const aborted = await queued;
    expect(aborted.finishReason).toEqual({ type: 'abort', message: 'Abort request' });
    expect(aborted.outputIds).toHaveLength(0);
    expect((await first).finishReason.type).toBe('length');
  });

  it('swaps weights during an in-place pause: held requests continue on the new version', async () => {
    const engine = new InferenceEngine({
      model: CausalLanguageModel.create(vocabulary, smallConfig),
      weightVersion: 'a',
    });
    const donor = CausalLanguageModel.create(vocabulary, { ...smallConfig, seed: 5 });
    const pending = engine.generate(request('held', 40));
    await waitFor(() => engine.statistics.decodeSteps >= 3);
    engine.pause('in_place');
    const { pausedRequests } = await engine.updateWeights({
      weights: donor.getWeights(),
      weightVersion: 'b',
    });
    expect(pausedRequests).toBe(1);
    expect(engine.weightVersion).toBe('b');
    engine.resume();
    const result = await pending;
    expect(result.weightVersion).toBe('b');
    expect(result.outputIds).toHaveLength(40);
    engine.model.dispose();
    donor.dispose();
  });

  it('stops at the context length and refuses work once closed', async () => {
    const engine = new InferenceEngine({ model });
    const long = {
      ...request('long', 1000),
      inputIds: Array.from({ length: 250 }, () => vocabulary.tokenIds[4]!),
    };
    const result = await engine.generate(long);
    expect(result.finishReason).toEqual({ type: 'length', length: 6 });
    engine.close();
    expect(() => engine.generate(request('late', 1))).toThrow(
      expect.objectContaining({ code: 'unavailable' }),
    );
  });
});
