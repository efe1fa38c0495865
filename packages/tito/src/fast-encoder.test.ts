import { readFile } from 'node:fs/promises';
import { Tokenizer } from '@huggingface/tokenizers';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { qwen3ModelDirectory } from './__fixtures__/qwen3-model.js';
import { qwenSplitSource } from './ascii-pieces.js';
import { createFastEncoder, createPieceSplitter, createSectionSplitter } from './fast-encoder.js';
import { readModelFiles } from './model-directory.js';
import { loadTokenizer, type TitoTokenizer } from './tokenizer.js';

// Pieces that exercise every branch: added tokens, ASCII words and numbers, whitespace runs and
// line breaks, contractions, non-ASCII letters (normalized and not), emoji, lone surrogates.
const fragments = [
  '<|im_start|>',
  '<|im_end|>',
  '<tool_call>',
  '</think>',
  '<|im_',
  '<',
  'user',
  ' Hello',
  "I'm",
  "'LL",
  ' 12345',
  '3.14',
  '\n',
  '\r\n',
  '   ',
  '\t',
  '{"a": [1, null]}',
  'naïve',
  'cafe\u0301',
  '漢字',
  ' Ωμέγα',
  '😀',
  '\ud800',
  '\udfff',
  '\u0000',
];

const text = fc.oneof(
  fc.array(fc.constantFrom(...fragments), { maxLength: 30 }).map((parts) => parts.join('')),
  fc.string({ unit: 'grapheme', maxLength: 60 }),
  fc.string({ unit: 'binary', maxLength: 60 }),
  fc.string({ maxLength: 80 }),
);

describe('the fast encoder', () => {
  let tokenizer: TitoTokenizer;
  beforeAll(async () => {
    tokenizer = await loadTokenizer(qwen3ModelDirectory);
  });

  it('is used for the Qwen3 tokenizer', () => {
    expect(tokenizer.fastEncoding).toBe(true);
  });

  it('gives the library ids on random text, special tokens and surrogates included', () => {
    fc.assert(
      fc.property(text, (input) => {
        expect(Array.from(tokenizer.encode(input))).toEqual(Array.from(tokenizer.libraryEncode(input)));
      }),
      { numRuns: 2000 },
    );
  });

  it('gives the library ids on source code and repeated text (cached pieces)', async () => {
    const source = await readFile(new URL('./tito-encoder.ts', import.meta.url), 'utf8');
    for (let round = 0; round < 2; round++) {
      for (let start = 0; start < source.length; start += 700) {
        const slice = source.slice(start, start + 1400);
        expect(Array.from(tokenizer.encode(slice))).toEqual(Array.from(tokenizer.libraryEncode(slice)));
      }
    }
    const long = `${'x'.repeat(300)} ${' '.repeat(200)}${'ab'.repeat(100)}`;
    expect(Array.from(tokenizer.encode(long))).toEqual(Array.from(tokenizer.libraryEncode(long)));
  });

  it('declines layouts it does not implement', async () => {
    const files = await readModelFiles(qwen3ModelDirectory);
    const library = new Tokenizer(files.tokenizerJson, files.tokenizerConfig) as unknown as {
      added_tokens: Array<{ lstrip: boolean }>;
      pre_tokenizer: { tokenizers: unknown[] };
      post_processor: unknown;
    };
    expect(createFastEncoder(library)).not.toBeNull();
    expect(createFastEncoder({})).toBeNull();
    const stripped = new Tokenizer(files.tokenizerJson, files.tokenizerConfig) as unknown as typeof library;
    (stripped.added_tokens[0] as { lstrip: boolean }).lstrip = true;
    expect(createFastEncoder(stripped)).toBeNull();
    const reordered = new Tokenizer(files.tokenizerJson, files.tokenizerConfig) as unknown as typeof library;
    reordered.pre_tokenizer.tokenizers.reverse();
    expect(createFastEncoder(reordered)).toBeNull();
    const templated = new Tokenizer(files.tokenizerJson, files.tokenizerConfig) as unknown as typeof library;
    templated.post_processor = { config: { type: 'TemplateProcessing' } };
    expect(createFastEncoder(templated)).toBeNull();
  });
});

// The library's own Qwen3 tokenizer: its compiled Split pattern, the pattern as the file writes it,
// and its added-token splitter.
async function libraryQwen3(): Promise<{
  split: { pattern: RegExp; config: { pattern: { Regex: string } } };
  splitter: { split(text: string): string[]; trie: unknown };
}> {
  const files = await readModelFiles(qwen3ModelDirectory);
  const library = new Tokenizer(files.tokenizerJson, files.tokenizerConfig) as unknown as {
    pre_tokenizer: { tokenizers: Array<{ pattern: RegExp; config: { pattern: { Regex: string } } }> };
    splitter_unnormalized: { split(text: string): string[]; trie: unknown };
  };
  return { split: library.pre_tokenizer.tokenizers[0]!, splitter: library.splitter_unnormalized };
}

describe('the added-token section splitter', () => {
  it('splits as the library does, walking its trie only where an added token can start', async () => {
    const { splitter } = await libraryQwen3();
    const sections = createSectionSplitter(splitter);
    // Not the library's split itself: its trie's first units (only `<` for Qwen3) are searched.
    expect(sections).not.toBe(splitter.split);
    fc.assert(
      fc.property(text, (input) => {
        expect(sections(input)).toEqual(splitter.split(input));
      }),
      { numRuns: 3000 },
    );
    expect(sections('')).toEqual(splitter.split(''));
    expect(sections('<<|im_start|><|im_end|>x<tool_call></tool_call')).toEqual(
      splitter.split('<<|im_start|><|im_end|>x<tool_call></tool_call'),
    );
  });

  it("uses the library's split for a trie it does not expect", () => {
    const split = (text: string) => [text, 'library'];
    expect(createSectionSplitter({ split, trie: undefined })('a')).toEqual(['a', 'library']);
    const wide = Object.fromEntries([...'abcdefghij'].map((unit) => [unit, { end: unit }]));
    expect(createSectionSplitter({ split, trie: wide })('a')).toEqual(['a', 'library']);
  });
});

describe('the piece splitter', () => {
  it("matches the Qwen3 tokenizer's pattern by hand, as the library compiles it", async () => {
    const { split } = await libraryQwen3();
    // The library's compiled source is its own, not the file's pattern nor qwenSplitSource.
    expect(createPieceSplitter(split.pattern, split.config.pattern.Regex).byHand).toBe(true);
    expect(createPieceSplitter(new RegExp(qwenSplitSource, 'gu')).byHand).toBe(true);
    expect(createPieceSplitter(split.pattern).byHand).toBe(split.pattern.source === qwenSplitSource);
    expect(createPieceSplitter(/\p{L}+|\s+/gu).byHand).toBe(false);
  });

  // The library's regex_split as written: matchAll, the text between matches, empty matches dropped.
  function reference(pattern: RegExp, text: string): string[] {
    const pieces: string[] = [];
    let previous = 0;
    for (const match of text.matchAll(pattern)) {
      if (previous < match.index) pieces.push(text.slice(previous, match.index));
      if (match[0].length > 0) pieces.push(match[0]);
      previous = match.index + match[0].length;
    }
    if (previous < text.length) pieces.push(text.slice(previous));
    return pieces;
  }

  it('splits as matchAll does, for patterns with gaps and empty matches too', () => {
    const patterns = [
      /\p{L}+|\s+/gu, // gaps: digits and punctuation fall between matches
      /a*/g, // empty matches everywhere
      /x*/gu, // empty matches before astral characters
      /(?:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu,
    ];
    const alphabet = ['a', 'b', 'x', ' ', '\n', '1', '.', "'s", 'é', '😀', '\ud800'];
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...alphabet), { maxLength: 24 }), (parts) => {
        const text = parts.join('');
        for (const pattern of patterns) {
          const pieces: string[] = [];
          createPieceSplitter(pattern)(text, (piece) => pieces.push(piece));
          expect(pieces).toEqual(reference(pattern, text));
          expect(pattern.lastIndex).toBe(0);
        }
      }),
      { numRuns: 500 },
    );
  });

  it("matches Qwen's pattern by hand as the regex does, ASCII edge cases and the characters it defers", async () => {
    const qwen = new RegExp(qwenSplitSource, 'gu');
    // The pattern as the library compiled it, with the file's pattern: hand-matched, deferring to it.
    const { split: librarySplit } = await libraryQwen3();
    const compiled = librarySplit.pattern;
    const byLibrary = createPieceSplitter(compiled, librarySplit.config.pattern.Regex);
    // The regex alone: a pattern with the same meaning but another source is never hand-matched.
    const regexOnly = new RegExp(`(?:${qwenSplitSource})`, 'gu');
    const split = (pattern: RegExp, text: string) => {
      const pieces: string[] = [];
      createPieceSplitter(pattern)(text, (piece) => pieces.push(piece));
      return pieces;
    };
    // Every ASCII class next to each other (apostrophes and contraction letters in both cases,
    // every whitespace, control characters) and the characters outside ASCII that continue a
    // letter run, a whitespace run or a symbol run, or are digits.
    const alphabet = [
      ...'aZ09 \t\n\r\v\f.({"\u0000\u007f',
      "'",
      's',
      'S',
      'r',
      'R',
      'e',
      'E',
      'v',
      'l',
      'L',
      've',
      'll',
      'LL',
      'd',
      'm',
      't',
      'é',
      '漢',
      '\u00a0',
      '\u2028',
      '\u3000',
      '—',
      '٣',
      '😀',
      '\ud800',
    ];
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...alphabet), { maxLength: 40 }), (parts) => {
        const text = parts.join('');
        const expected = reference(qwen, text);
        expect(split(qwen, text)).toEqual(expected);
        expect(split(regexOnly, text)).toEqual(expected);
        expect(reference(compiled, text)).toEqual(expected);
        const pieces: string[] = [];
        byLibrary(text, (piece) => pieces.push(piece));
        expect(pieces).toEqual(expected);
        // One-unit ASCII pieces handed over as code units, the rest as strings, in the same order.
        const mixed: string[] = [];
        byLibrary(
          text,
          (piece) => mixed.push(piece),
          (code) => {
            expect(code).toBeLessThan(128);
            mixed.push(String.fromCharCode(code));
          },
        );
        expect(mixed).toEqual(expected);
      }),
      { numRuns: 5000 },
    );
    const source = await readFile(new URL('./fast-encoder.ts', import.meta.url), 'utf8');
    expect(split(qwen, source)).toEqual(reference(qwen, source));
  });
});
