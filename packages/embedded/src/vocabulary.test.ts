import { describe, expect, it } from 'vitest';
import { qwen3Tokenizer } from './__fixtures__/embedded-fixture.js';
import { buildVocabulary, TokenVocabulary } from './vocabulary.js';

describe('buildVocabulary with the real Qwen3 tokenizer', () => {
  it('holds the ids of the texts and the special tokens, sorted, with an unknown slot', async () => {
    const tokenizer = await qwen3Tokenizer();
    const vocabulary = buildVocabulary({
      tokenizer,
      texts: ['Hello world', '<|im_start|>user\nHi<|im_end|>'],
      tokenIds: tokenizer.specialTokens.values(),
    });
    expect(vocabulary.has(9707)).toBe(true);
    expect(vocabulary.has(1879)).toBe(true);
    expect(vocabulary.has(151645)).toBe(true);
    expect(vocabulary.has(151644)).toBe(true);
    expect(Array.from(vocabulary.tokenIds)).toEqual([...vocabulary.tokenIds].sort((a, b) => a - b));
    expect(vocabulary.slotCount).toBe(vocabulary.outputCount + 1);
    expect(vocabulary.slotOf(9707)).toBe(vocabulary.outputClassOf(9707) + 1);
    expect(vocabulary.slotOf(12345)).toBe(0);
    expect(vocabulary.outputClassOf(12345)).toBe(-1);
    expect(vocabulary.tokenIdOfOutputClass(vocabulary.outputClassOf(1879))).toBe(1879);
    expect(Array.from(vocabulary.slotsOf([9707, 12345]))).toEqual([vocabulary.slotOf(9707), 0]);
  });

  it('takes every added token of a tokenizer, special or not', async () => {
    const tokenizer = await qwen3Tokenizer();
    const vocabulary = buildVocabulary({ tokenizer, texts: ['Hello'], addedTokensOf: tokenizer });
    const added = tokenizer.files.tokenizerJson.added_tokens as Array<{ id: number; content: string }>;
    const toolCall = added.find((token) => token.content === '<tool_call>')!;
    // Not a special token in Qwen3, yet written by every tool call.
    expect([...tokenizer.specialTokens.values()]).not.toContain(toolCall.id);
    for (const token of added) expect(vocabulary.has(token.id)).toBe(true);
    expect(vocabulary.has(9707)).toBe(true);
    expect(vocabulary.outputCount).toBe(new Set([...added.map((token) => token.id), 9707]).size);
  });

  it('rejects empty or invalid tables and texts without a tokenizer', () => {
    expect(() => new TokenVocabulary([])).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => new TokenVocabulary([1, -2])).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => buildVocabulary({ texts: ['x'] })).toThrow(
      expect.objectContaining({ code: 'invalid_argument' }),
    );
    expect(new TokenVocabulary([3, 1, 3]).equals(new TokenVocabulary([1, 3]))).toBe(true);
  });
});
