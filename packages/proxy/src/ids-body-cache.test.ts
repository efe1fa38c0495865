import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { IdsBodyCache } from './ids-body-cache.js';
import { PromptIds } from './prompt-ids.js';
import { TokenBuffer } from './token-buffer.js';

const before = '{"input_ids":[';
const expected = (ids: readonly number[], after: string) =>
  `{"input_ids":${JSON.stringify(ids).slice(0, -1)}${after}`;

describe('IdsBodyCache', () => {
  it('continues a history’s previous body and writes exactly what idsJson writes', () => {
    const id = fc.oneof(
      fc.integer({ min: 0, max: 151_668 }),
      fc.integer({ min: 0, max: 0xff_ffff }),
      fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
    );
    // A conversation: each turn the prompt is the history so far (or, now and then, a shorter part
    // of it: a branch) and a tail; the history then gains the tail and an answer.
    const turn = fc.record({
      tail: fc.array(id, { maxLength: 40 }),
      answer: fc.array(id, { maxLength: 40 }),
      cut: fc.option(fc.nat(), { freq: 5 }),
      after: fc.string({ maxLength: 12 }).map((text) => `],"rid":${JSON.stringify(text)}}`),
      ok: fc.oneof({ arbitrary: fc.constant(true), weight: 4 }, { arbitrary: fc.constant(false), weight: 1 }),
    });
    fc.assert(
      fc.property(
        fc.array(id, { maxLength: 200 }),
        fc.array(turn, { minLength: 1, maxLength: 12 }),
        (start, turns) => {
          const cache = new IdsBodyCache();
          const buffer = new TokenBuffer(16);
          buffer.appendContext(start);
          const history = start.map((value) => value | 0);
          for (const { tail, answer, cut, after, ok } of turns) {
            const baseLength = cut === null ? history.length : cut % (history.length + 1);
            const prompt = new PromptIds(buffer, baseLength, Int32Array.from(tail));
            const body = cache.body(before, prompt, after);
            expect(body.bytes.toString('latin1')).toBe(
              expected([...history.slice(0, baseLength), ...tail], after),
            );
            body.release(ok);
            buffer.appendContext(tail);
            buffer.appendContext(answer);
            history.push(...tail.map((value) => value | 0), ...answer.map((value) => value | 0));
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('writes the next body in the kept one’s bytes, and a fresh one after a failed request', () => {
    const cache = new IdsBodyCache();
    const buffer = new TokenBuffer(16);
    buffer.appendContext(Array.from({ length: 1000 }, (_, index) => index));
    const first = cache.body(before, new PromptIds(buffer, 1000, Int32Array.of(7)), '],"n":1}');
    first.release(true);
    buffer.appendContext([7, 8, 9]);
    const second = cache.body(before, new PromptIds(buffer, 1003, Int32Array.of()), '],"n":2}');
    // The same memory: only the three new ids and the end were written.
    expect(second.bytes.buffer).toBe(first.bytes.buffer);
    expect(second.bytes.byteOffset).toBe(first.bytes.byteOffset);
    expect(JSON.parse(second.bytes.toString())).toEqual({
      input_ids: [...Array.from({ length: 1000 }, (_, index) => index), 7, 8, 9],
      n: 2,
    });
    second.release(false);
    const third = cache.body(before, new PromptIds(buffer, 1003, Int32Array.of()), '],"n":3}');
    expect(third.bytes.buffer).not.toBe(second.bytes.buffer);
    third.release(true);
  });

  it('leaves a body in flight untouched: a second request of the same history writes its own', () => {
    const cache = new IdsBodyCache();
    const buffer = new TokenBuffer(16);
    buffer.appendContext([1, 2, 3]);
    const first = cache.body(before, new PromptIds(buffer, 3, Int32Array.of(4)), '],"n":1}');
    const sent = first.bytes.toString('latin1');
    buffer.appendContext([4, 5]);
    const second = cache.body(before, new PromptIds(buffer, 5, Int32Array.of(6)), '],"n":2}');
    expect(first.bytes.toString('latin1')).toBe(sent);
    expect(second.bytes.toString('latin1')).toBe(expected([1, 2, 3, 4, 5, 6], '],"n":2}'));
    second.release(true);
    first.release(true);
    // Released twice is released once.
    first.release(false);
    const third = cache.body(before, new PromptIds(buffer, 5, Int32Array.of(6, 7)), ']}');
    expect(third.bytes.toString('latin1')).toBe(expected([1, 2, 3, 4, 5, 6, 7], ']}'));
    expect(third.bytes.buffer).toBe(first.bytes.buffer);
  });

  it('keeps bodies within its budget, the least recently used of the idle ones going first', () => {
    const idsPerHistory = 2000;
    const buffers = Array.from({ length: 4 }, (_, history) => {
      const buffer = new TokenBuffer(16);
      buffer.appendContext(
        Array.from({ length: idsPerHistory }, (_, index) => 100_000 + history * 10 + index),
      );
      return buffer;
    });
    const bodyOf = (cache: IdsBodyCache, buffer: TokenBuffer) =>
      cache.body(before, new PromptIds(buffer, idsPerHistory, Int32Array.of()), ']}');
    const sizing = new IdsBodyCache();
    const one = bodyOf(sizing, buffers[0]!);
    one.release(true);
    const perBody = sizing.keptBytes;
    expect(perBody).toBeGreaterThanOrEqual(one.bytes.length);
    // Room for two and a half bodies; any body unused for 0 ms may be evicted.
    const cache = new IdsBodyCache({ budgetBytes: Math.floor(perBody * 2.5), idleMs: 0 });
    const firsts = buffers.map((buffer) => {
      const body = bodyOf(cache, buffer);
      body.release(true);
      expect(cache.keptBytes).toBeLessThanOrEqual(perBody * 2.5);
      return body.bytes.buffer;
    });
    expect(cache.keptBytes).toBe(2 * perBody);
    // Histories 2 and 3 are kept and continued; 0 and 1 were evicted and are written afresh.
    const again = [3, 2, 0, 1].map((history) => {
      const body = bodyOf(cache, buffers[history]!);
      body.release(true);
      expect(JSON.parse(body.bytes.toString()).input_ids[0]).toBe(100_000 + history * 10);
      return body.bytes.buffer;
    });
    expect(again).toEqual([firsts[3], firsts[2], expect.anything(), expect.anything()]);
    expect(again[2]).not.toBe(firsts[0]);
    expect(again[3]).not.toBe(firsts[1]);
    // A body larger than the whole budget is written but not kept.
    const small = new IdsBodyCache({ budgetBytes: 64 });
    const large = bodyOf(small, buffers[0]!);
    large.release(true);
    expect(small.keptBytes).toBe(0);
    expect(JSON.parse(large.bytes.toString()).input_ids).toHaveLength(idsPerHistory);
  });

  it('keeps the bodies it has when full of recently used ones, instead of the new one', () => {
    const buffers = Array.from({ length: 3 }, (_, history) => {
      const buffer = new TokenBuffer(16);
      buffer.appendContext(Array.from({ length: 2000 }, (_, index) => 1000 * history + index));
      return buffer;
    });
    const sizing = new IdsBodyCache();
    sizing.body(before, new PromptIds(buffers[0]!, 2000, Int32Array.of()), ']}').release(true);
    const cache = new IdsBodyCache({ budgetBytes: Math.floor(sizing.keptBytes * 2.5), idleMs: 60_000 });
    const send = (history: number) => {
      const body = cache.body(before, new PromptIds(buffers[history]!, 2000, Int32Array.of()), ']}');
      body.release(true);
      expect(JSON.parse(body.bytes.toString()).input_ids[1]).toBe(1000 * history + 1);
      return body.bytes.buffer;
    };
    // Three histories taking turns, two of them kept: those two are continued every round.
    const first = [0, 1, 2].map(send);
    for (let round = 0; round < 3; round++) {
      const again = [0, 1, 2].map(send);
      expect(again[0]).toBe(first[0]);
      expect(again[1]).toBe(first[1]);
      expect(again[2]).not.toBe(first[2]);
    }
    expect(cache.keptBytes).toBe(2 * sizing.keptBytes);
  });
});
