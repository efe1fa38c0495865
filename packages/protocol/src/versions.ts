import { z } from 'zod';
import { DressageError } from './errors.js';

/** Version label of tokens no model generated (prompt, tool output, context). */
export const CONTEXT_TOKEN_VERSION = '-1';

/** Version label of output tokens whose engine reported no weight version. */
export const UNKNOWN_TOKEN_VERSION = 'unknown';

const nonRealVersions = new Set(['', '-1', 'unknown', 'none']);

/**
 * True for a weight version that names real weights. `""`, `"-1"`, `"unknown"` and `"none"` (any
 * case) are placeholders, as are null and undefined.
 */
export function isRealVersion(version: string | null | undefined): version is string {
  return version !== null && version !== undefined && !nonRealVersions.has(version.trim().toLowerCase());
}

/** A run of consecutive tokens produced by one weight version: `[start, end)`. */
export const versionSpanSchema = z
  .object({
    start: z.int().nonnegative(),
    end: z.int().nonnegative(),
    version: z.string(),
  })
  .refine((span) => span.end > span.start, { message: 'end must be greater than start', path: ['end'] });

/** A run of consecutive tokens produced by one weight version: `[start, end)`. */
export type VersionSpan = z.infer<typeof versionSpanSchema>;

/** Run-length encodes per-token versions: `["1","1","2"]` → `[{start:0,end:2,version:"1"},{start:2,end:3,version:"2"}]`. */
export function versionsToSpans(versions: readonly string[]): VersionSpan[] {
  const spans: VersionSpan[] = [];
  let start = 0;
  for (let i = 1; i <= versions.length; i++) {
    if (i === versions.length || versions[i] !== versions[start]) {
      spans.push({ start, end: i, version: versions[start] as string });
      start = i;
    }
  }
  return spans;
}

/**
 * Expands run-length spans back to one version per token. Spans must start at 0, be contiguous and
 * non-empty; with `length`, they must cover exactly that many tokens.
 */
export function spansToVersions(spans: readonly VersionSpan[], length?: number): string[] {
  let expected = 0;
  for (const [index, span] of spans.entries()) {
    if (
      !Number.isInteger(span.start) ||
      !Number.isInteger(span.end) ||
      span.start !== expected ||
      span.end <= span.start
    ) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `version_spans[${index}]: [${span.start}, ${span.end}) does not continue at token ${expected} with a non-empty run`,
        details: { index, start: span.start, end: span.end, expected_start: expected },
      });
    }
    expected = span.end;
  }
  if (length !== undefined && expected !== length) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `version_spans cover ${expected} tokens, expected ${length}`,
      details: { covered: expected, length },
    });
  }
  const versions = new Array<string>(expected);
  for (const span of spans) versions.fill(span.version, span.start, span.end);
  return versions;
}

/** The distinct real versions in first-appearance order (used for staleness and version spans). */
export function distinctRealVersions(versions: Iterable<string>): string[] {
  const seen = new Set<string>();
  for (const version of versions) if (isRealVersion(version)) seen.add(version);
  return [...seen];
}
