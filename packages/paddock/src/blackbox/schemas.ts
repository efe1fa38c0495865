import { type BlackboxMessage, blackboxMessageSchema, type TurnUsage } from '@dressage/protocol/blackbox';
import { z } from 'zod';

export type { BlackboxMessage, TurnUsage };

/** Session, turn and instance ids. */
export const idPattern = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** A session, turn or instance id. */
export const idSchema = z.string().regex(idPattern, 'must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$');

/** `server_config` of a register request: per-binding overrides of the server's settings. */
export const serverConfigSchema = z.strictObject({
  runtime_root: z.string().min(1).optional(),
  max_sessions: z.int().positive().optional(),
  max_turns: z.int().positive().optional(),
  backend_timeout: z.number().positive().optional(),
  execute_cmd_timeout: z.number().positive().optional(),
  router_timeout: z.number().positive().optional(),
  runtime_health_check_interval: z.number().positive().optional(),
  runtime_health_check_retries: z.int().nonnegative().optional(),
  runtime_health_check_retry_delay: z.number().nonnegative().optional(),
  agent_reuse: z.boolean().optional(),
  agent_max_samples: z.int().positive().optional(),
  agent_max_age: z.number().positive().optional(),
  agent_max_rss_mb: z.number().positive().optional(),
});

/** `backend_options.proxy`: the in-process LLM proxy's settings. Extra keys are rejected. */
export const proxyOptionsSchema = z.strictObject({
  sticky_header_name: z.string().min(1).default('X-SMG-Routing-Key'),
  max_steps: z.int().positive().nullable().default(100),
  default_temperature: z.number().nullable().default(null),
});

/** Settings of the in-process LLM proxy. */
export type ProxyOptions = z.output<typeof proxyOptionsSchema>;

/** POST /v1/rollout/register. */
export const registerRequestSchema = z.strictObject({
  blackbox_type: z.string().min(1),
  router: z.string().min(1),
  router_api_path: z.string().default('/v1'),
  bound_session_id: idSchema,
  bound_instance_id: idSchema,
  bound_sandbox_id: z.string().min(1).nullable().optional(),
  system_prompt_file: z.string().min(1).nullable().optional(),
  backend_options: z.record(z.string(), z.unknown()).default({}),
  server_config: serverConfigSchema.nullable().optional(),
});

/** A register request after defaults. */
export type RegisterRequest = z.output<typeof registerRequestSchema>;

/** A register request as a client sends it (defaults may be left out). */
export type BlackboxRegisterRequest = z.input<typeof registerRequestSchema>;

/** One chat message of the BlackboxServer API. */
export const messageSchema = blackboxMessageSchema;

/** POST /v1/sessions/{id}/messages. */
export const messagesRequestSchema = z.strictObject({
  turn_id: idSchema.nullable().optional(),
  messages: z.array(messageSchema),
  metadata: z.record(z.string(), z.unknown()).nullable().optional(),
  mode: z.enum(['sync', 'async']).default('sync'),
});

/** POST /v1/sessions/{id}/execute_cmd. */
export const executeCommandRequestSchema = z.strictObject({
  cmd: z.string().min(1),
  timeout: z.number().positive().nullable().optional(),
});

/** POST /v1/rollout/pause. */
export const blackboxPauseRequestSchema = z.strictObject({
  reason: z.string().min(1).default('weight_update'),
  timeout_seconds: z.number().positive().nullable().optional(),
});

/** POST /v1/rollout/resume. */
export const resumeRequestSchema = z.strictObject({
  reason: z.string().min(1).default('weight_update'),
  version: z.union([z.string(), z.number()]).nullable().optional(),
});

/** An empty {@link TurnUsage}. */
export function emptyUsage(): TurnUsage {
  return { total_tokens: 0, input_tokens: 0, output_tokens: 0, reasoning_tokens: 0, steps: 0, tool_calls: 0 };
}
