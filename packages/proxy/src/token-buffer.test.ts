import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TokenBuffer } from './token-buffer.js';

function range(start: number, count: number): Int32Array {
  return Int32Array.from({ length: count }, (_, index) => start + index);
}

describe('TokenBuffer', () => {
  it('gives recorded logprobs for response tokens and 0 for context tokens, up to any end', () => {
    const buffer = new TokenBuffer(4);
    buffer.appendContext(range(100, 5));
    buffer.appendResponse(range(200, 3), Float32Array.of(-0.5, -0.25, -0.125), [{ end: 3, version: 'v1' }]);
    // Two responses in a row share one range.
    buffer.appendResponse(range(300, 2), Float32Array.of(-1, -2), [{ end: 2, version: 'v2' }]);
    buffer.appendContext(range(400, 4));
    buffer.appendResponse(range(500, 1), Float32Array.of(-3), [{ end: 1, version: 'v2' }]);

    expect(buffer.length).toBe(15);
    expect(buffer.responseRanges).toEqual([5, 10, 14, 15]);
    expect(Array.from(buffer.slice(0, buffer.length))).toEqual([
      ...range(100, 5),
      ...range(200, 3),
      ...range(300, 2),
      ...range(400, 4),
      500,
    ]);
    expect(Array.from(buffer.logprobsUpTo(15))).toEqual([
      0, 0, 0, 0, 0, -0.5, -0.25, -0.125, -1, -2, 0, 0, 0, 0, -3,
    ]);
    // An end inside a response range cuts it there.
    expect(Array.from(buffer.logprobsUpTo(7))).toEqual([0, 0, 0, 0, 0, -0.5, -0.25]);
    expect(Array.from(buffer.logprobsUpTo(12))).toEqual([0, 0, 0, 0, 0, -0.5, -0.25, -0.125, -1, -2, 0, 0]);
    expect(buffer.logprobsUpTo(0)).toHaveLength(0);
  });

  it('stores logprobs for response tokens only, and keeps little spare room as it grows', () => {
    const buffer = new TokenBuffer();
    // An agent's conversation: mostly context (prompts, tool outputs), some model output.
    for (let turn = 0; turn < 80; turn++) {
      buffer.appendContext(range(turn * 10_000, 850));
      const logprobs = Float32Array.from({ length: 70 }, (_, index) => -index / 100);
      buffer.appendResponse(range(turn * 10_000 + 5_000, 70), logprobs, [{ end: 70, version: 'v1' }]);
    }
    expect(buffer.length).toBe(80 * 920);
    const responseTokens = 80 * 70;
    // Float32 for each response token plus at most an eighth (or 1,024 tokens) spare, not 4 bytes
    // for every token.
    expect(buffer.logprobsByteLength).toBeLessThanOrEqual(
      4 * Math.max(responseTokens * 1.125, responseTokens + 1024),
    );
    // Ids: at most an eighth spare (doubling left up to half of the array empty).
    expect(buffer.capacity).toBeLessThanOrEqual(Math.ceil(buffer.length * 1.125) + 1024);
    const logprobs = buffer.logprobsUpTo(buffer.length);
    expect(logprobs[850]).toBeCloseTo(0);
    expect(logprobs[851]).toBeCloseTo(-0.01);
    expect(logprobs[79 * 920 + 850 + 69]).toBeCloseTo(-0.69);
    expect(logprobs[79 * 920 + 849]).toBe(0);
  });

  it('keeps every id exactly, whatever its width, appended in any pieces', () => {
    const id = fc.oneof(
      fc.integer({ min: 0, max: 0xffff }),
      fc.integer({ min: 0, max: 151_668 }),
      fc.integer({ min: 0, max: 0xff_ffff }),
      fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
    );
    const piece = fc.record({ response: fc.boolean(), ids: fc.array(id, { maxLength: 40 }) });
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 30 }), fc.integer({ min: 1, max: 64 }), (pieces, capacity) => {
        const buffer = new TokenBuffer(capacity);
        const expected: number[] = [];
        for (const { response, ids } of pieces) {
          const typed = Int32Array.from(ids);
          if (response)
            buffer.appendResponse(typed, new Float32Array(ids.length), [{ end: ids.length, version: 'v1' }]);
          // Context arrives as a plain array as well as typed.
          else buffer.appendContext(ids);
          expected.push(...typed);
        }
        expect(buffer.length).toBe(expected.length);
        expect(Array.from(buffer.slice(0, buffer.length))).toEqual(expected);
        const start = Math.floor(expected.length / 3);
        const target = new Int32Array(expected.length + 2).fill(7);
        buffer.copyIdsInto(target, start, expected.length, 2);
        expect(Array.from(target.subarray(2, 2 + expected.length - start))).toEqual(expected.slice(start));
        expect(target[0]).toBe(7);
        for (let index = 0; index < expected.length; index += 7)
          expect(buffer.idAt(index)).toBe(expected[index]);
        expect(buffer.idAt(expected.length)).toBeUndefined();
      }),
      { numRuns: 300 },
    );
  });

  it("takes 2 bytes a token for ids below 65,536, 3 up to 2^24 (Qwen3's vocabulary), 4 beyond", () => {
    const bytesPerToken = (ids: Int32Array) => {
      const buffer = new TokenBuffer(ids.length);
      buffer.appendContext(ids);
      return buffer.idsByteLength / buffer.capacity;
    };
    expect(bytesPerToken(range(60_000, 1000))).toBe(2);
    // One id past 16 bits widens the buffer, not before.
    expect(bytesPerToken(Int32Array.of(...range(0, 999), 151_668))).toBe(3);
    expect(bytesPerToken(Int32Array.of(...range(0, 999), 0x100_0000))).toBe(4);
    // Widening later keeps what was stored before.
    const buffer = new TokenBuffer(8);
    buffer.appendContext(range(1, 20));
    buffer.appendContext(Int32Array.of(70_000));
    buffer.appendContext(Int32Array.of(-5, 2 ** 30));
    expect(Array.from(buffer.slice(0, buffer.length))).toEqual([...range(1, 20), 70_000, -5, 2 ** 30]);
  });
});
