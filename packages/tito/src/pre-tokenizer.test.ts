import { readFile } from 'node:fs/promises';
import { Tokenizer } from '@huggingface/tokenizers';
import { describe, expect, it } from 'vitest';
import { qwen3ModelDirectory } from './__fixtures__/qwen3-model.js';
import { readModelFiles } from './model-directory.js';
import { acceleratePreTokenizer } from './pre-tokenizer.js';

describe('acceleratePreTokenizer', () => {
  it('keeps the ids of the library on mixed text and reports that it stayed', async () => {
    const files = await readModelFiles(qwen3ModelDirectory);
    const plain = new Tokenizer(files.tokenizerJson, files.tokenizerConfig);
    const fast = new Tokenizer(files.tokenizerJson, files.tokenizerConfig);
    const encode = (tokenizer: Tokenizer, text: string) =>
      tokenizer.encode(text, { add_special_tokens: false }).ids;
    expect(acceleratePreTokenizer(fast, (text) => encode(fast, text), ['Hello world'])).toBe(true);
    const source = await readFile(new URL('./tito-encoder.ts', import.meta.url), 'utf8');
    const texts = [
      'naïve café — 漢字 😀 \ud800 x\r\n\t  y',
      '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
      ...Array.from({ length: 40 }, (_, index) => source.slice(index * 150, index * 150 + 300)),
    ];
    for (const text of texts) expect(encode(fast, text)).toEqual(encode(plain, text));
  });

  it('restores the library when the probes disagree', async () => {
    const files = await readModelFiles(qwen3ModelDirectory);
    const tokenizer = new Tokenizer(files.tokenizerJson, files.tokenizerConfig);
    let calls = 0;
    // An encoder that answers differently after the swap stands for a mismatch.
    const encode = () => [calls++];
    expect(acceleratePreTokenizer(tokenizer, encode, ['a'])).toBe(false);
    const preTokenizer = (tokenizer as unknown as { pre_tokenizer: object }).pre_tokenizer;
    expect(Object.hasOwn(preTokenizer, 'pre_tokenize')).toBe(false);
  });
});
