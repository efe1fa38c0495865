import type { AdapterCapabilities } from './adapter.js';
import type { BlackboxServerConfig } from './config.js';
import type { BlackboxMessage, TurnUsage } from './schemas.js';

/** Overall server state. */
export type ServerStatus = 'idle' | 'initializing' | 'ready' | 'error' | 'shutting_down';
/** Session state. */
export type SessionState = 'active' | 'desynced' | 'aborted';
/** Turn status. */
export type TurnStatus = 'queued' | 'inflight' | 'committed' | 'failed' | 'cancelled' | 'unknown';

/** Why a turn did not commit: one row of the reference's turn error table. */
export interface TurnError {
  error: string;
  message: string;
  details: Record<string, unknown>;
  http_status: number;
}

/** The rollout the server is bound to, as `/v1/status` and register report it. */
export interface BindingInfo {
  runtime_id: string;
  blackbox_type: string;
  router_raw: string;
  router_base_url: string;
  router_api_path: string;
  bound_session_id: string;
  bound_instance_id: string;
  bound_sandbox_id: string | null;
  system_prompt: { source_file: string; runtime_file: string; applies_to: string } | null;
  runtime_dir: string;
  registered_at: string;
  backend_options: Record<string, unknown>;
}

/** The settings in force, without the listen address. */
export type ConfigBody = Omit<BlackboxServerConfig, 'host' | 'port'>;

/** `GET /health` (no request id: the reference answers it bare). */
export interface HealthBody {
  healthy: boolean;
  version: string;
}

/** Session counts of `GET /v1/status`. */
export interface SessionCounts {
  active_count: number;
  desynced_count: number;
  aborted_count: number;
  total_count: number;
  max_sessions: number;
}

/** `GET /v1/status`. */
export interface StatusBody {
  status: ServerStatus;
  binding: BindingInfo | null;
  sessions: SessionCounts;
  capabilities: AdapterCapabilities;
  config: ConfigBody;
  implemented_backends: string[];
  known_backends: string[];
  last_error?: string;
}

/** `POST /v1/rollout/register`. */
export interface RegisterBody {
  status: ServerStatus;
  binding: BindingInfo | null;
  capabilities: AdapterCapabilities;
  config: ConfigBody;
}

/** `POST /v1/rollout/pause` (also the details of its 503 `pause_timeout`). */
export interface PauseBody {
  status: 'paused';
  reason: string;
  quiesced: boolean;
  version: string | null;
  http_inflight_requests: number;
  active_sglang_generations: number;
  suspended_generations: number;
  details: Record<string, unknown>;
}

/** `POST /v1/rollout/resume`. */
export interface ResumeBody {
  status: 'resumed';
  reason: string;
  version: string | null;
  details: Record<string, unknown>;
}

/** `GET /v1/rollout/pause_state`. */
export interface PauseStateBody {
  paused: boolean;
  pause_reason: string | null;
  version: string | null;
  adapter: {
    paused: boolean;
    pause_reason: string | null;
    version: string | null;
    http_inflight_requests: number;
    total_paused_seconds: number;
  };
}

/** One turn, as `GET /v1/sessions/{id}/turns/{turn}` answers it. */
export interface TurnBody {
  session_id: string;
  instance_id: string;
  turn_id: string;
  status: TurnStatus;
  state: SessionState;
  outputs?: BlackboxMessage[];
  usage?: TurnUsage;
  backend?: TurnBackend;
  error?: TurnError;
  created_at: string;
  updated_at: string;
}

/** The agent that ran a turn. */
export interface TurnBackend {
  type: string;
  backend_session_id: string | null;
}

/** `POST /v1/sessions/{id}/messages` in async mode (202). */
export interface MessagesAcceptedBody {
  session_id: string;
  instance_id: string;
  turn_id: string;
  status: TurnStatus;
  idempotent_replay: boolean;
}

/** `POST /v1/sessions/{id}/messages` in sync mode: the committed turn. */
export interface MessagesBody {
  session_id: string;
  instance_id: string;
  turn_id: string;
  state: SessionState;
  idempotent_replay: boolean;
  outputs: BlackboxMessage[];
  backend: TurnBackend;
  usage: TurnUsage;
}

/** `POST /v1/sessions/{id}/turns/{turn}/cancel`. */
export interface CancelBody {
  session_id: string;
  instance_id: string;
  turn_id: string;
  status: TurnStatus | 'cancel_requested';
  state: SessionState;
}

/** `POST /v1/sessions/{id}/abort`. */
export interface AbortBody {
  session_id: string;
  instance_id: string;
  action: 'abort';
  state: SessionState;
  mode: 'noop' | 'best_effort';
}

/** `GET /v1/sessions/{id}`. */
export interface SessionBody {
  session_id: string;
  instance_id: string;
  state: SessionState;
  turn_count: number;
  active_turn_id: string | null;
  latest_turn_id: string | null;
  created_at: string;
  updated_at: string;
  history?: BlackboxMessage[];
  turns?: TurnBody[];
  trace?: { turn_id: string; status: TurnStatus | undefined }[];
}

/** `POST /v1/sessions/{id}/execute_cmd`. */
export interface ExecuteCommandBody {
  session_id: string;
  instance_id: string;
  cmd: string;
  stdout: string;
  stderr: string;
  returncode: number;
  timed_out: boolean;
  duration_seconds: number;
  started_at: string;
  finished_at: string;
}
