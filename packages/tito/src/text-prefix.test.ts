import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { startsWithText } from './text-prefix.js';

describe('startsWithText', () => {
  it('agrees with String.prototype.startsWith', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), fc.string({ unit: 'binary' }), (text, other) => {
        expect(startsWithText(text, other)).toBe(text.startsWith(other));
        const prefix = text.slice(0, other.length);
        expect(startsWithText(text, prefix)).toBe(true);
        expect(startsWithText(`${text}${other}`, text)).toBe(true);
      }),
      { numRuns: 1000 },
    );
    expect(startsWithText('', '')).toBe(true);
    expect(startsWithText('a', '')).toBe(true);
    expect(startsWithText('', 'a')).toBe(false);
  });
});
