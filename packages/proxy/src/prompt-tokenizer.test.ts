import { readFileSync } from 'node:fs';
import { createFixedRenderer, loadTokenizer } from '@dressage/tito';
import { describe, expect, it } from 'vitest';
import { qwen35ChatTemplatePath, qwenModelDirectory } from './__fixtures__/harness.js';
import { createPromptTokenizer } from './prompt-tokenizer.js';

describe('prompt tokenizer memos', () => {
  it('give the same ids as encoding afresh, as copies a caller may change', async () => {
    const tokenizer = await loadTokenizer(qwenModelDirectory);
    const renderer = createFixedRenderer('qwen3_5', {
      chatTemplate: readFileSync(qwen35ChatTemplatePath, 'utf8'),
    });
    const prompt = createPromptTokenizer({ tokenizer, renderer, tokenizerId: 'qwen', chatTemplate: null });
    const messages = [
      { role: 'system' as const, content: 'You are a careful agent.' },
      { role: 'user' as const, content: 'List the files.' },
    ];
    const fresh = tokenizer.encode(renderer.render(messages, { addGenerationPrompt: true }));
    const first = prompt.encodeFull(messages, null);
    expect(Array.from(first)).toEqual(Array.from(fresh));
    first.fill(0);
    expect(Array.from(prompt.encodeFull(messages, null))).toEqual(Array.from(fresh));

    // Incremental deltas go through the short-text memo (separator, generation prompt).
    const base = [...messages, { role: 'assistant' as const, content: 'a.ts b.ts' }];
    const next = [...base, { role: 'user' as const, content: 'Open a.ts.' }];
    const prefix = tokenizer.encode(renderer.render(base));
    const prefixEnd = { length: prefix.length, lastId: prefix[prefix.length - 1]! };
    const once = prompt.encodeIncremental(prefixEnd, base, next);
    once.fill(-1);
    const twice = prompt.encodeIncremental(prefixEnd, base, next);
    expect(Array.from(twice)).not.toContain(-1);
    expect(tokenizer.decode(Array.from(twice))).toBe(
      '<|im_start|>user\nOpen a.ts.<|im_end|>\n<|im_start|>assistant\n<think>\n',
    );
  });
});
