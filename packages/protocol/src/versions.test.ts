import { describe, expect, it } from 'vitest';
import { DressageError } from './errors.js';
import {
  distinctRealVersions,
  isRealVersion,
  spansToVersions,
  versionSpanSchema,
  versionsToSpans,
} from './versions.js';

describe('version spans', () => {
  it('run-length encodes per-token versions with exclusive ends', () => {
    expect(versionsToSpans(['-1', '-1', '3', '3', '3', '-1', '4'])).toEqual([
      { start: 0, end: 2, version: '-1' },
      { start: 2, end: 5, version: '3' },
      { start: 5, end: 6, version: '-1' },
      { start: 6, end: 7, version: '4' },
    ]);
    expect(versionsToSpans([])).toEqual([]);
    expect(versionsToSpans(['7'])).toEqual([{ start: 0, end: 1, version: '7' }]);
  });

  it('expands spans back to the same per-token versions', () => {
    const versions: string[] = [];
    for (let i = 0; i < 1000; i++) versions.push(String(Math.floor(i / 37) % 3));
    expect(spansToVersions(versionsToSpans(versions), versions.length)).toEqual(versions);
    expect(spansToVersions([])).toEqual([]);
  });

  it('rejects gaps, overlaps, empty runs and a wrong total', () => {
    expect(() =>
      spansToVersions([
        { start: 0, end: 2, version: 'a' },
        { start: 3, end: 4, version: 'b' },
      ]),
    ).toThrow(/version_spans\[1\]/);
    expect(() =>
      spansToVersions([
        { start: 0, end: 2, version: 'a' },
        { start: 1, end: 4, version: 'b' },
      ]),
    ).toThrow(DressageError);
    expect(() => spansToVersions([{ start: 0, end: 0, version: 'a' }])).toThrow(DressageError);
    expect(() => spansToVersions([{ start: 1, end: 2, version: 'a' }])).toThrow(/token 0/);
    expect(() => spansToVersions([{ start: 0, end: 2, version: 'a' }], 3)).toThrow(
      /cover 2 tokens, expected 3/,
    );
  });

  it('validates a span with its schema', () => {
    expect(versionSpanSchema.safeParse({ start: 0, end: 1, version: '1' }).success).toBe(true);
    const bad = versionSpanSchema.safeParse({ start: 2, end: 2, version: '1' });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.path).toEqual(['end']);
  });
});

describe('real versions', () => {
  it('treats placeholders as not real, in any case', () => {
    for (const placeholder of ['', '-1', 'unknown', 'UNKNOWN', 'none', 'None', ' -1 ']) {
      expect(isRealVersion(placeholder)).toBe(false);
    }
    expect(isRealVersion(null)).toBe(false);
    expect(isRealVersion(undefined)).toBe(false);
    for (const real of ['0', '1', 'v12', 'weight_v000003']) expect(isRealVersion(real)).toBe(true);
  });

  it('lists distinct real versions in first-appearance order', () => {
    expect(distinctRealVersions(['-1', '2', '2', 'unknown', '1', '2', '3'])).toEqual(['2', '1', '3']);
  });
});
