// What an upstream's error answer says, whichever server wrote it.
import { CONTEXT_OVERFLOW_MESSAGE, jsonObjectSchema } from '@dressage/protocol';
import { z } from 'zod';

// Upstream error bodies come in several envelopes: `{error: "name"}`, `{code}`, `{error: {code,
// message}}` (OpenAI) and `{detail: {error, message}}` (FastAPI). Fields of an unexpected type are
// read as absent, never as a failed parse.
const namedErrorSchema = z.looseObject({
  error: z.string().optional().catch(undefined),
  code: z.string().optional().catch(undefined),
  message: z.string().optional().catch(undefined),
});
const upstreamErrorSchema = namedErrorSchema.extend({
  error: z.union([z.string(), namedErrorSchema]).optional().catch(undefined),
  detail: namedErrorSchema.optional().catch(undefined),
});

/** The error name or code an upstream error body carries, in whichever envelope; null when none. */
export function upstreamErrorCode(body: unknown): string | null {
  const parsed = upstreamErrorSchema.safeParse(body);
  if (!parsed.success) return null;
  const { error, code, detail } = parsed.data;
  if (typeof error === 'string') return error;
  if (code !== undefined) return code;
  for (const nested of [error, detail]) {
    if (nested?.error !== undefined) return nested.error;
    if (nested?.code !== undefined) return nested.code;
  }
  return null;
}

/** The message an upstream error body carries; the body itself as text when it has none. */
export function upstreamErrorMessage(body: unknown): string {
  const parsed = upstreamErrorSchema.safeParse(body);
  if (parsed.success) {
    const { detail, error } = parsed.data;
    for (const candidate of [detail, typeof error === 'string' ? undefined : error, parsed.data]) {
      if (candidate?.message !== undefined) return candidate.message;
    }
  }
  return typeof body === 'string' ? body : JSON.stringify(body);
}

/** The 413 body of a context overflow (the Dressage proxy's, or a look-alike of another server). */
export const contextOverflowIncidentSchema = z.looseObject({
  message: z.string().catch(CONTEXT_OVERFLOW_MESSAGE),
  details: jsonObjectSchema.catch({}),
});

/** An error frame at the head of a stream: `{error: {status_code?, ...}, ...}`. */
export const upstreamStreamErrorSchema = z.looseObject({
  error: z.looseObject({ status_code: z.number().optional().catch(undefined) }),
});
