import { z } from 'zod';

// The answers of a BlackboxServer (the reference's blackbox_server API). Every answer but /health
// also carries the `request_id` of the call.

/** One chat message in or out of a BlackboxServer turn. */
export const blackboxMessageSchema = z.looseObject({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.unknown().optional(),
  reasoning_content: z.string().nullable().optional(),
  tool_calls: z.array(z.unknown()).nullable().optional(),
  tool_call_id: z.string().nullable().optional(),
  name: z.string().nullable().optional(),
});

/** A message in or out of a BlackboxServer turn. */
export type BlackboxMessage = z.infer<typeof blackboxMessageSchema>;

/** Overall state of a BlackboxServer. */
export const blackboxServerStatusSchema = z.enum(['idle', 'initializing', 'ready', 'error', 'shutting_down']);
/** Overall state of a BlackboxServer. */
export type BlackboxServerStatus = z.infer<typeof blackboxServerStatusSchema>;

/** State of the bound session. */
export const blackboxSessionStateSchema = z.enum(['active', 'desynced', 'aborted']);
/** State of the bound session. */
export type BlackboxSessionState = z.infer<typeof blackboxSessionStateSchema>;

/** Status of a turn. */
export const blackboxTurnStatusSchema = z.enum([
  'queued',
  'inflight',
  'committed',
  'failed',
  'cancelled',
  'unknown',
]);
/** Status of a turn. */
export type BlackboxTurnStatus = z.infer<typeof blackboxTurnStatusSchema>;

/** Token and step counts of a turn. */
export const turnUsageSchema = z.object({
  total_tokens: z.int().nonnegative(),
  input_tokens: z.int().nonnegative(),
  output_tokens: z.int().nonnegative(),
  reasoning_tokens: z.int().nonnegative(),
  steps: z.int().nonnegative(),
  tool_calls: z.int().nonnegative(),
});
/** Token and step counts of a turn. */
export type TurnUsage = z.infer<typeof turnUsageSchema>;

/** Why a turn did not commit: one row of the turn error table. */
export const turnErrorSchema = z.object({
  error: z.string(),
  message: z.string(),
  details: z.record(z.string(), z.unknown()),
  http_status: z.int(),
});
/** Why a turn did not commit. */
export type TurnError = z.infer<typeof turnErrorSchema>;

/** The agent that ran a turn. */
export const turnBackendSchema = z.object({
  type: z.string(),
  backend_session_id: z.string().nullable(),
});
/** The agent that ran a turn. */
export type TurnBackend = z.infer<typeof turnBackendSchema>;

/** What a backend supports. */
export const blackboxCapabilitiesSchema = z.object({
  chat: z.boolean(),
  abort: z.boolean(),
  pause_resume: z.boolean(),
  stream: z.boolean(),
  multi_message_input: z.boolean(),
  system_message: z.boolean(),
  history_injection: z.boolean(),
});
/** What a backend supports. */
export type BlackboxCapabilities = z.infer<typeof blackboxCapabilitiesSchema>;

/** The rollout a BlackboxServer is bound to. */
export const blackboxBindingSchema = z.object({
  runtime_id: z.string(),
  blackbox_type: z.string(),
  router_raw: z.string(),
  router_base_url: z.string(),
  router_api_path: z.string(),
  bound_session_id: z.string(),
  bound_instance_id: z.string(),
  bound_sandbox_id: z.string().nullable(),
  system_prompt: z
    .object({ source_file: z.string(), runtime_file: z.string(), applies_to: z.string() })
    .nullable(),
  runtime_dir: z.string(),
  registered_at: z.string(),
  backend_options: z.record(z.string(), z.unknown()),
});
/** The rollout a BlackboxServer is bound to. */
export type BlackboxBinding = z.infer<typeof blackboxBindingSchema>;

/** The settings in force (without the listen address); durations in seconds, router_timeout in ms. */
export const blackboxConfigBodySchema = z.looseObject({
  runtime_root: z.string(),
  max_sessions: z.int(),
  max_turns: z.int(),
  backend_timeout: z.number(),
  execute_cmd_timeout: z.number(),
  router_timeout: z.number(),
  shutdown_timeout: z.number(),
  runtime_health_check_interval: z.number(),
  runtime_health_check_retries: z.int(),
  runtime_health_check_retry_delay: z.number(),
  inside_sandbox: z.boolean(),
  max_request_bytes: z.int(),
});
/** The settings in force. */
export type BlackboxConfigBody = z.infer<typeof blackboxConfigBodySchema>;

/** `GET /health` (no request id). */
export const blackboxHealthSchema = z.object({ healthy: z.boolean(), version: z.string() });
/** `GET /health`. */
export type BlackboxHealth = z.infer<typeof blackboxHealthSchema>;

/** Session counts of `GET /v1/status`. */
export const blackboxSessionCountsSchema = z.object({
  active_count: z.int().nonnegative(),
  desynced_count: z.int().nonnegative(),
  aborted_count: z.int().nonnegative(),
  total_count: z.int().nonnegative(),
  max_sessions: z.int(),
});
/** Session counts of `GET /v1/status`. */
export type BlackboxSessionCounts = z.infer<typeof blackboxSessionCountsSchema>;

/** `POST /v1/rollout/register`. */
export const blackboxRegisterResponseSchema = z.looseObject({
  status: blackboxServerStatusSchema,
  binding: blackboxBindingSchema.nullable(),
  capabilities: blackboxCapabilitiesSchema,
  config: blackboxConfigBodySchema,
});
/** `POST /v1/rollout/register`. */
export type BlackboxRegisterResponse = z.infer<typeof blackboxRegisterResponseSchema>;

/** `GET /v1/status`. */
export const blackboxStatusResponseSchema = blackboxRegisterResponseSchema.extend({
  sessions: blackboxSessionCountsSchema,
  implemented_backends: z.array(z.string()),
  known_backends: z.array(z.string()),
  last_error: z.string().optional(),
});
/** `GET /v1/status`. */
export type BlackboxStatusResponse = z.infer<typeof blackboxStatusResponseSchema>;

/** `POST /v1/rollout/pause` of a BlackboxServer (also the details of its 503 `pause_timeout`). */
export const blackboxPauseResponseSchema = z.looseObject({
  status: z.literal('paused'),
  reason: z.string(),
  quiesced: z.boolean(),
  version: z.string().nullable(),
  http_inflight_requests: z.int().nonnegative(),
  active_sglang_generations: z.int().nonnegative(),
  suspended_generations: z.int().nonnegative(),
  details: z.record(z.string(), z.unknown()),
});
/** `POST /v1/rollout/pause` of a BlackboxServer. */
export type BlackboxPauseResponse = z.infer<typeof blackboxPauseResponseSchema>;

/** `POST /v1/rollout/resume` of a BlackboxServer. */
export const blackboxResumeResponseSchema = z.looseObject({
  status: z.literal('resumed'),
  reason: z.string(),
  version: z.string().nullable(),
  details: z.record(z.string(), z.unknown()),
});
/** `POST /v1/rollout/resume` of a BlackboxServer. */
export type BlackboxResumeResponse = z.infer<typeof blackboxResumeResponseSchema>;

/** `GET /v1/rollout/pause_state` of a BlackboxServer. */
export const blackboxPauseStateSchema = z.looseObject({
  paused: z.boolean(),
  pause_reason: z.string().nullable(),
  version: z.string().nullable(),
  adapter: z.looseObject({
    paused: z.boolean(),
    pause_reason: z.string().nullable(),
    version: z.string().nullable(),
    http_inflight_requests: z.int().nonnegative(),
    total_paused_seconds: z.number().nonnegative(),
  }),
});
/** `GET /v1/rollout/pause_state` of a BlackboxServer. */
export type BlackboxPauseState = z.infer<typeof blackboxPauseStateSchema>;

/** One turn: `GET /v1/sessions/{id}/turns/{turn}`. */
export const blackboxTurnSchema = z.looseObject({
  session_id: z.string(),
  instance_id: z.string(),
  turn_id: z.string(),
  status: blackboxTurnStatusSchema,
  state: blackboxSessionStateSchema,
  outputs: z.array(blackboxMessageSchema).optional(),
  usage: turnUsageSchema.optional(),
  backend: turnBackendSchema.optional(),
  error: turnErrorSchema.optional(),
  created_at: z.string(),
  updated_at: z.string(),
});
/** One turn. */
export type BlackboxTurn = z.infer<typeof blackboxTurnSchema>;

/** `POST /v1/sessions/{id}/messages` in async mode (202). */
export const blackboxMessagesAcceptedSchema = z.looseObject({
  session_id: z.string(),
  instance_id: z.string(),
  turn_id: z.string(),
  status: blackboxTurnStatusSchema,
  idempotent_replay: z.boolean(),
});
/** `POST /v1/sessions/{id}/messages` in async mode. */
export type BlackboxMessagesAccepted = z.infer<typeof blackboxMessagesAcceptedSchema>;

/** `POST /v1/sessions/{id}/messages` in sync mode: the committed turn. */
export const blackboxMessagesResponseSchema = z.looseObject({
  session_id: z.string(),
  instance_id: z.string(),
  turn_id: z.string(),
  state: blackboxSessionStateSchema,
  idempotent_replay: z.boolean(),
  outputs: z.array(blackboxMessageSchema),
  backend: turnBackendSchema,
  usage: turnUsageSchema,
});
/** `POST /v1/sessions/{id}/messages` in sync mode. */
export type BlackboxMessagesResponse = z.infer<typeof blackboxMessagesResponseSchema>;

/** `POST /v1/sessions/{id}/turns/{turn}/cancel`. */
export const blackboxCancelResponseSchema = z.looseObject({
  session_id: z.string(),
  instance_id: z.string(),
  turn_id: z.string(),
  status: z.union([blackboxTurnStatusSchema, z.literal('cancel_requested')]),
  state: blackboxSessionStateSchema,
});
/** `POST /v1/sessions/{id}/turns/{turn}/cancel`. */
export type BlackboxCancelResponse = z.infer<typeof blackboxCancelResponseSchema>;

/** `POST /v1/sessions/{id}/abort`. */
export const blackboxAbortResponseSchema = z.looseObject({
  session_id: z.string(),
  instance_id: z.string(),
  action: z.literal('abort'),
  state: blackboxSessionStateSchema,
  mode: z.enum(['noop', 'best_effort']),
});
/** `POST /v1/sessions/{id}/abort`. */
export type BlackboxAbortResponse = z.infer<typeof blackboxAbortResponseSchema>;

/** `GET /v1/sessions/{id}`, with history, turns and trace when asked for. */
export const blackboxSessionResponseSchema = z.looseObject({
  session_id: z.string(),
  instance_id: z.string(),
  state: blackboxSessionStateSchema,
  turn_count: z.int().nonnegative(),
  active_turn_id: z.string().nullable(),
  latest_turn_id: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
  history: z.array(blackboxMessageSchema).optional(),
  turns: z.array(blackboxTurnSchema).optional(),
  trace: z.array(z.object({ turn_id: z.string(), status: blackboxTurnStatusSchema.optional() })).optional(),
});
/** `GET /v1/sessions/{id}`. */
export type BlackboxSessionResponse = z.infer<typeof blackboxSessionResponseSchema>;

/** `POST /v1/sessions/{id}/execute_cmd`. */
export const blackboxExecuteCommandResponseSchema = z.looseObject({
  session_id: z.string(),
  instance_id: z.string(),
  cmd: z.string(),
  stdout: z.string(),
  stderr: z.string(),
  returncode: z.int(),
  timed_out: z.boolean(),
  duration_seconds: z.number(),
  started_at: z.string(),
  finished_at: z.string(),
});
/** `POST /v1/sessions/{id}/execute_cmd`. */
export type BlackboxExecuteCommandResponse = z.infer<typeof blackboxExecuteCommandResponseSchema>;

/** The error envelope of every non-2xx answer. */
export const blackboxErrorBodySchema = z.looseObject({
  request_id: z.string().optional(),
  error: z.string(),
  message: z.string(),
  details: z.record(z.string(), z.unknown()).default({}),
});
/** The error envelope of every non-2xx answer. */
export type BlackboxErrorBody = z.infer<typeof blackboxErrorBodySchema>;
