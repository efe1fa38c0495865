import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { idsJson } from './ids-json.js';
import { PromptIds } from './prompt-ids.js';
import { TokenBuffer } from './token-buffer.js';

describe('ids as JSON bytes', () => {
  it('writes any int32 ids exactly as JSON.stringify does, between the given texts', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })),
        fc.string(),
        (values, text) => {
          const ids = Int32Array.from(values);
          const bytes = idsJson(`{"t":${JSON.stringify(text)},"ids":[`, ids, '],"n":1}');
          expect(JSON.parse(bytes.toString('utf8'))).toEqual({ t: text, ids: values, n: 1 });
          expect(bytes.toString('utf8')).toBe(
            `{"t":${JSON.stringify(text)},"ids":${JSON.stringify(values)},"n":1}`,
          );
        },
      ),
      { numRuns: 500 },
    );
  });

  it('writes vocabulary ids from the table as they were first written, next to untabled ones', () => {
    // Ids of a vocabulary repeat: the first request fills the table, later ones read it back.
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.integer({ min: 0, max: 2 ** 18 - 1 }),
            fc.constantFrom(0, 9, 10, 99_999, 100_000, 151_645, 2 ** 18 - 1, 2 ** 18, 999_999, 1_000_000),
            fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
          ),
          { maxLength: 200 },
        ),
        (values) => {
          const ids = Int32Array.from(values);
          for (let round = 0; round < 2; round++)
            expect(idsJson('{"ids":[', ids, ']}').toString('latin1')).toBe(
              `{"ids":${JSON.stringify(values)}}`,
            );
        },
      ),
      { numRuns: 500 },
    );
  });

  it('makes room for long runs of wide ids anywhere in a long array', () => {
    // Room is first made for tabled ids only; every wider id grows the buffer as it comes.
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.integer({ min: 0, max: 2 ** 18 - 1 }),
            fc.constantFrom(-(2 ** 31), 2 ** 31 - 1, -1_000_000_000, 1_000_000_000),
          ),
          { minLength: 500, maxLength: 3000 },
        ),
        fc.string({ unit: 'grapheme', maxLength: 40 }),
        (values, text) => {
          const after = `],"t":${JSON.stringify(text)}}`;
          const bytes = idsJson('{"ids":[', Int32Array.from(values), after);
          expect(bytes.toString('utf8')).toBe(
            `{"ids":${JSON.stringify(values)},"t":${JSON.stringify(text)}}`,
          );
        },
      ),
      { numRuns: 200 },
    );
    const wide = Array.from({ length: 5000 }, (_, index) => (index % 2 === 0 ? -(2 ** 31) : 2 ** 31 - 1));
    expect(idsJson('[', Int32Array.from(wide), ']').toString('latin1')).toBe(JSON.stringify(wide));
  });

  it('writes every digit count and the extremes', () => {
    const values = [0, 9, 10, 99, 100, 999, 1000, 151_645, 999_999, 1_000_000, 2 ** 31 - 1, -1, -(2 ** 31)];
    const bytes = idsJson('[', Int32Array.from(values), ']');
    expect(bytes.toString('latin1')).toBe(JSON.stringify(values));
    expect(idsJson('[', new Int32Array(0), ']').toString()).toBe('[]');
  });

  it('writes a prompt read from a token buffer and its tail, at any width, as the joined ids', () => {
    const id = fc.oneof(
      fc.integer({ min: 0, max: 0xffff }),
      fc.integer({ min: 0, max: 151_668 }),
      fc.integer({ min: 0, max: 0xff_ffff }),
      fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
    );
    fc.assert(
      fc.property(
        fc.array(fc.array(id, { maxLength: 300 }), { maxLength: 6 }),
        fc.array(id, { maxLength: 50 }),
        fc.nat(),
        (pieces, tail, cut) => {
          const buffer = new TokenBuffer(16);
          for (const piece of pieces) buffer.appendContext(piece);
          const history = pieces.flat().map((value) => value | 0);
          const baseLength = history.length === 0 ? 0 : cut % (history.length + 1);
          const prompt = new PromptIds(buffer, baseLength, Int32Array.from(tail));
          // The buffer grows after the prompt was taken (a later step): the prompt does not change.
          buffer.appendContext(Int32Array.of(70_000, 5));
          const expected = [...history.slice(0, baseLength), ...tail];
          expect(prompt.length).toBe(expected.length);
          expect(idsJson('{"input_ids":[', prompt, '],"n":1}').toString('latin1')).toBe(
            `{"input_ids":${JSON.stringify(expected)},"n":1}`,
          );
          expect(Array.from(prompt.toInt32Array())).toEqual(expected);
        },
      ),
      { numRuns: 300 },
    );
    const alone = PromptIds.of(Int32Array.of(1, 2));
    expect(idsJson('[', alone, ']').toString()).toBe('[1,2]');
    expect(alone.toInt32Array()).toBe(alone.tail);
  });
});
