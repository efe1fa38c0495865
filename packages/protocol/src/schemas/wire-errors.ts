import { z } from 'zod';
import { jsonObjectSchema } from './common.js';

/** FastAPI's error envelope, used by every proxy error except context overflow. */
export const detailErrorBodySchema = z.looseObject({
  detail: z.union([z.string(), jsonObjectSchema]),
});

/** `{"detail": ...}`. */
export type DetailErrorBody = z.infer<typeof detailErrorBodySchema>;

/** Which side of the context window overflowed. */
export const contextOverflowPhaseSchema = z.enum(['input', 'input_output']);

/** The top-level (not `detail`-wrapped) body of a 413 context overflow. */
export const contextOverflowBodySchema = z.looseObject({
  error: z.literal('context_overflow'),
  message: z.string(),
  details: z.looseObject({
    phase: contextOverflowPhaseSchema,
    context_window: z.int().positive(),
    input_tokens: z.int().nonnegative(),
    output_tokens: z.int().nonnegative(),
    total_tokens: z.int().nonnegative(),
    max_tokens: z.int().nullable(),
    session_id: z.string(),
    turn_id: z.string().nullable(),
    last_proxy_step_recorded: z.boolean(),
  }),
});

/** The body of a 413 context overflow. */
export type ContextOverflowBody = z.infer<typeof contextOverflowBodySchema>;

/** The fixed message of a context overflow body. */
export const CONTEXT_OVERFLOW_MESSAGE = 'Dressage proxy context window overflow.';

/** Builds the 413 body for a context overflow. */
export function contextOverflowBody(details: ContextOverflowBody['details']): ContextOverflowBody {
  return { error: 'context_overflow', message: CONTEXT_OVERFLOW_MESSAGE, details };
}

const sessionFields = { session_id: z.string().optional(), instance_id: z.string().optional() };

/** The structured `detail` objects of the proxy's 502/503 errors, discriminated by `error`. */
export const proxyErrorDetailSchema = z.discriminatedUnion('error', [
  z.looseObject({
    error: z.literal('trajectory_version_changed'),
    message: z.string(),
    previous_versions: z.array(z.string()).optional(),
    new_versions: z.array(z.string()).optional(),
    session_epoch: z.int().optional(),
    current_epoch: z.int().optional(),
    ...sessionFields,
  }),
  z.looseObject({
    error: z.literal('partial_rollout_staleness_exceeded'),
    message: z.string(),
    versions: z.array(z.string()),
    version_span: z.int(),
    version_switches: z.int(),
    max_preempts: z.int(),
    max_version_span: z.int(),
    ...sessionFields,
  }),
  z.looseObject({
    error: z.literal('weight_version_mismatch'),
    expected: z.string(),
    observed: z.string().nullable(),
    ...sessionFields,
  }),
  z.looseObject({ error: z.literal('weight_version_unavailable'), message: z.string(), ...sessionFields }),
  z.looseObject({ error: z.literal('generation_preempted'), message: z.string(), ...sessionFields }),
  z.looseObject({
    error: z.literal('tool_call_hook_failed'),
    stage: z.enum(['before', 'after']),
    message: z.string(),
    ...sessionFields,
  }),
  z.looseObject({ error: z.literal('proxy_shutting_down') }),
  z.looseObject({ error: z.literal('sglang_upstream_unavailable'), detail: z.string() }),
]);

/** A structured proxy error detail. */
export type ProxyErrorDetail = z.infer<typeof proxyErrorDetailSchema>;

/** The `error` names of {@link ProxyErrorDetail}. */
export type ProxyErrorName = ProxyErrorDetail['error'];

/**
 * The frame a heartbeat stream sends when its generation failed after the 200 status line was
 * already written: the original error body's fields plus a fixed type, a code and the HTTP status.
 */
export const streamErrorFrameSchema = z.looseObject({
  error: z.looseObject({
    type: z.literal('dressage_proxy_error'),
    code: z.string().min(1),
    message: z.string(),
    status_code: z.int().min(400).max(599),
  }),
});

/** A stream error frame's JSON. */
export type StreamErrorFrame = z.infer<typeof streamErrorFrameSchema>;

/**
 * Converts an error response (status and JSON body) into a stream error frame. Fields of the body
 * (or of its `detail` object) are kept; `code` is the payload's `code`, else its `error`, else
 * `http_error`; `message` is the payload's message, else its string detail.
 */
export function toStreamErrorFrame(statusCode: number, body: unknown): StreamErrorFrame {
  let payload: Record<string, unknown> = {};
  let message: string | undefined;
  if (typeof body === 'object' && body !== null) {
    const record = body as Record<string, unknown>;
    if (typeof record.detail === 'string') message = record.detail;
    else if (typeof record.detail === 'object' && record.detail !== null) {
      payload = { ...(record.detail as Record<string, unknown>) };
    } else payload = { ...record };
  } else if (typeof body === 'string') message = body;
  const code =
    (typeof payload.code === 'string' && payload.code) ||
    (typeof payload.error === 'string' && payload.error) ||
    'http_error';
  const text = typeof payload.message === 'string' ? payload.message : (message ?? `HTTP ${statusCode}`);
  return {
    error: { ...payload, type: 'dressage_proxy_error', code, message: text, status_code: statusCode },
  };
}
