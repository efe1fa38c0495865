import { z } from 'zod';
import { type Segment, segmentSchema, segmentShapeSchema, segmentToJson } from './segment.js';

/** `POST /session/finalize`: the trajectory is stored and can be read. */
export const finalizeResponseSchema = z.looseObject({
  success: z.boolean(),
  session_id: z.string(),
  trajectory_id: z.string(),
  instance_id: z.string(),
  finalization_id: z.string(),
  num_steps: z.int().nonnegative(),
  num_turns: z.int().nonnegative(),
  num_segments: z.int().nonnegative(),
  num_timeline_segments: z.int().nonnegative(),
  history_rewritten: z.boolean(),
  token_build_mode: z.enum(['tito', 'snapshot']),
  token_build_model: z.string().nullable(),
  record_token_versions: z.boolean(),
  mask_nonlast_version_tokens: z.boolean(),
  /** Tool-call hook results forgotten with the session. */
  tool_call_hook_keys_purged: z.int().nonnegative().optional(),
});

/** `POST /session/finalize`. */
export type FinalizeResponse = z.infer<typeof finalizeResponseSchema>;

/** `POST /session/discard` (idempotent). */
export const discardResponseSchema = z.looseObject({
  success: z.boolean(),
  session_id: z.string(),
  session_removed: z.boolean(),
  segments_removed: z.int().nonnegative(),
  tool_call_hook_keys_purged: z.int().nonnegative(),
});

/** `POST /session/discard`. */
export type DiscardResponse = z.infer<typeof discardResponseSchema>;

/** `GET /trajectory/stats`, also the `meta_info` of a read. */
export const trajectoryStatsSchema = z.looseObject({
  total_items: z.int().nonnegative(),
  total_instances: z.int().nonnegative(),
  ready_instances: z.int().nonnegative(),
});

/** `GET /trajectory/stats`. */
export type TrajectoryStats = z.infer<typeof trajectoryStatsSchema>;

/**
 * `POST /trajectory/read` as JSON, every token checked: one trajectory's segments (`mode:
 * "trajectory"`) or groups of them (`mode: "batch"`).
 */
export const trajectoryReadResponseSchema = z.discriminatedUnion('mode', [
  z.looseObject({
    success: z.boolean(),
    mode: z.literal('trajectory'),
    data: z.array(segmentSchema),
    meta_info: trajectoryStatsSchema,
    drained: z.boolean(),
  }),
  z.looseObject({
    success: z.boolean(),
    mode: z.literal('batch'),
    data: z.array(z.array(segmentSchema)),
    meta_info: trajectoryStatsSchema,
  }),
]);

/** A `/trajectory/read` answer with typed token data. */
export type TrajectoryReadResponse =
  | { success: boolean; mode: 'trajectory'; data: Segment[]; meta_info: TrajectoryStats; drained: boolean }
  | { success: boolean; mode: 'batch'; data: Segment[][]; meta_info: TrajectoryStats };

/**
 * What a client checks of a `/trajectory/read` answer: its structure and each segment's shape (see
 * `segmentShapeSchema`), with the token data moved into typed arrays.
 */
export const trajectoryReadShapeSchema: z.ZodType<TrajectoryReadResponse, unknown> = z.discriminatedUnion(
  'mode',
  [
    z.looseObject({
      success: z.boolean(),
      mode: z.literal('trajectory'),
      data: z.array(segmentShapeSchema),
      meta_info: trajectoryStatsSchema,
      // Older proxies leave it out: nothing was drained then.
      drained: z.boolean().default(false),
    }),
    z.looseObject({
      success: z.boolean(),
      mode: z.literal('batch'),
      data: z.array(z.array(segmentShapeSchema)),
      meta_info: trajectoryStatsSchema,
    }),
  ],
);

/**
 * The JSON text of a `/trajectory/read` answer: typed arrays are written straight into the text
 * (no array of numbers in between).
 */
export function trajectoryReadToJson(response: TrajectoryReadResponse): string {
  const data =
    response.mode === 'trajectory'
      ? `[${response.data.map(segmentToJson).join(',')}]`
      : `[${response.data.map((group) => `[${group.map(segmentToJson).join(',')}]`).join(',')}]`;
  const { data: _data, ...rest } = response;
  const head = JSON.stringify(rest);
  return `${head.slice(0, -1)},"data":${data}}`;
}

/** `GET /v1/rollout/pause_state` of the proxy. */
export const rolloutPauseStateSchema = z.looseObject({
  paused: z.boolean(),
  reason: z.string().nullable(),
  version: z.string().nullable(),
  rollout_epoch: z.int().nonnegative(),
  shutting_down: z.boolean(),
  partial_rollout: z.boolean(),
  active_sglang_generations: z.int().nonnegative(),
  suspended_generations: z.int().nonnegative(),
  active_request_ids: z.array(z.string()),
  /** Chunks that ended preempted since start (absent from the reference's proxy). */
  preempted_chunks: z.int().nonnegative().optional(),
  /** Of those, the ones no pause of this proxy asked for (slime pausing its engines itself). */
  unrequested_preemptions: z.int().nonnegative().optional(),
});

/** `GET /v1/rollout/pause_state` of the proxy. */
export type RolloutPauseState = z.infer<typeof rolloutPauseStateSchema>;

/** `POST /v1/rollout/pause` of the proxy. */
export const rolloutPauseResponseSchema = z.looseObject({
  status: z.enum(['paused', 'already_paused']),
  reason: z.string(),
  mode: z.string(),
  quiesced: z.boolean(),
  preempted: z.boolean(),
  fallback: z.string().nullable(),
  active_sglang_generations: z.int().nonnegative(),
  suspended_generations: z.int().nonnegative(),
  version: z.string().nullable(),
  abort_attempted_request_ids: z.array(z.string()),
  abort_succeeded_request_ids: z.array(z.string()),
  abort_failed_request_ids: z.array(z.string()),
  abort_errors: z.record(z.string(), z.unknown()),
  preempted_request_ids: z.array(z.string()),
});

/** `POST /v1/rollout/pause` of the proxy. */
export type RolloutPauseResponse = z.infer<typeof rolloutPauseResponseSchema>;

/** The proxy's probe of the engine before a resume: ready once a worker answers over HTTP. */
export const engineReadinessSchema = z.looseObject({
  ready: z.boolean(),
  healthy_http_workers: z.int().nonnegative(),
  worker_urls: z.array(z.string()),
});

/** The proxy's probe of the engine before a resume. */
export type EngineReadiness = z.infer<typeof engineReadinessSchema>;

/** `POST /v1/rollout/resume` of the proxy. */
export const rolloutResumeResponseSchema = z.looseObject({
  status: z.enum(['resumed', 'already_running']),
  reason: z.string().nullable(),
  version: z.string().nullable(),
  rollout_epoch: z.int().nonnegative(),
  shutting_down: z.boolean(),
  active_sglang_generations: z.int().nonnegative(),
  suspended_generations: z.int().nonnegative(),
  /** The engine readiness probe, when the proxy was paused. */
  readiness: engineReadinessSchema.optional(),
});

/** `POST /v1/rollout/resume` of the proxy. */
export type RolloutResumeResponse = z.infer<typeof rolloutResumeResponseSchema>;

/** `GET /integration/capabilities`: how the proxy builds tokens and which weights it serves. */
export const capabilitiesResponseSchema = z.looseObject({
  schema_version: z.literal('dressage.proxy.integration/v1'),
  token_build_mode: z.enum(['tito', 'snapshot']),
  token_build_model: z.string().nullable(),
  tokenizer_id: z.string().nullable(),
  chat_template_fingerprint: z.string().nullable(),
  record_token_versions: z.boolean(),
  mask_nonlast_version_tokens: z.boolean(),
  max_output_tokens: z.int().nullable(),
  partial_rollout: z.boolean(),
  max_partial_rollout_preempts: z.int().nullable(),
  current_weight_version: z.string().nullable(),
  cached_weight_version: z.string().nullable(),
  weight_version_authoritative: z.boolean(),
  weight_versions_consistent: z.boolean(),
  weight_version_source: z.enum([
    'unavailable',
    'controller_busy',
    'worker_snapshot',
    'generation_observation',
  ]),
  weight_version_worker_count: z.int().nonnegative(),
  supports_expected_version: z.boolean(),
});

/** `GET /integration/capabilities`. */
export type CapabilitiesResponse = z.infer<typeof capabilitiesResponseSchema>;
