import type { z } from 'zod';
import { DressageError } from './errors.js';

/** One problem found in an input, located by its field path. */
export interface ValidationIssue {
  /** Dotted path with bracketed indexes, e.g. `messages[2].tool_calls[0].function.name`; `(root)` for the whole value. */
  path: string;
  message: string;
}

/** Result of {@link safeParseWire}: zod's result shape, with a DressageError on failure. */
export type ParseResult<T> = { success: true; data: T } | { success: false; error: DressageError };

/** Renders a zod issue path the way the field is written in JSON: `a.b[3].c`. */
export function formatIssuePath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out === '' ? '(root)' : out;
}

/** Turns a zod error into located issues, one per leaf problem. */
export function issuesFromZodError(error: z.ZodError): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  collectIssues(error.issues, [], issues);
  return issues;
}

function collectIssues(
  source: readonly z.core.$ZodIssue[],
  prefix: readonly PropertyKey[],
  out: ValidationIssue[],
): void {
  for (const issue of source) {
    const path = [...prefix, ...issue.path];
    // A union reports one nested issue list per branch; follow the branch that got furthest
    // instead of a generic "invalid input", so the message names the real bad field.
    if (issue.code === 'invalid_union' && issue.errors.length > 0) {
      const deepest = issue.errors.reduce((best, branch) => (depth(branch) > depth(best) ? branch : best));
      if (depth(deepest) > 0) {
        collectIssues(deepest, path, out);
        continue;
      }
    }
    out.push({ path: formatIssuePath(path), message: issue.message });
  }
}

// How far into the value a branch's issues reach, counting nested unions.
function depth(issues: readonly z.core.$ZodIssue[]): number {
  let deepest = 0;
  for (const issue of issues) {
    let nested = 0;
    if (issue.code === 'invalid_union')
      for (const branch of issue.errors) nested = Math.max(nested, depth(branch));
    deepest = Math.max(deepest, issue.path.length + nested);
  }
  return deepest;
}

function validationError(what: string, error: z.ZodError): DressageError {
  const issues = issuesFromZodError(error);
  const summary = issues.map((issue) => `${issue.path}: ${issue.message}`).join('; ');
  return new DressageError({
    code: 'invalid_argument',
    message: `Invalid ${what}: ${summary}`,
    details: { issues },
    cause: error,
  });
}

/**
 * Parses `value` with `schema`; on failure returns a DressageError (`invalid_argument`) whose message
 * names every bad field's path and whose `details.issues` lists them.
 */
export function safeParseWire<TSchema extends z.ZodType>(
  schema: TSchema,
  value: unknown,
  what = 'input',
): ParseResult<z.output<TSchema>> {
  const result = schema.safeParse(value);
  if (result.success) return { success: true, data: result.data };
  return { success: false, error: validationError(what, result.error) };
}

/** Like {@link safeParseWire}, but throws the DressageError. */
export function parseWire<TSchema extends z.ZodType>(
  schema: TSchema,
  value: unknown,
  what = 'input',
): z.output<TSchema> {
  const result = safeParseWire(schema, value, what);
  if (!result.success) throw result.error;
  return result.data;
}
