import { DressageError } from '@dressage/protocol';
import { readSecret } from '@dressage/protocol/internal';

/** Settings of a BlackboxServer. Durations are in seconds, as on the wire. */
export interface BlackboxServerConfig {
  /** Listen address. Default 127.0.0.1: another address (`0.0.0.0`) is a deliberate choice. */
  host: string;
  port: number;
  runtime_root: string;
  max_sessions: number;
  max_turns: number;
  backend_timeout: number;
  execute_cmd_timeout: number;
  /** Milliseconds, as the reference spells it. */
  router_timeout: number;
  shutdown_timeout: number;
  runtime_health_check_interval: number;
  runtime_health_check_retries: number;
  runtime_health_check_retry_delay: number;
  /**
   * The server runs inside a sandbox (a paddock slot): only then does `execute_cmd` run commands,
   * because outside one they would run as the server's own user on the host.
   */
  inside_sandbox: boolean;
  /** Largest accepted request body in bytes (413 beyond it). */
  max_request_bytes: number;
  /**
   * Keep the agent (and its LLM proxy) running between the samples a slot serves, when its adapter
   * can drop one sample's state (opencode: its server process); otherwise every registration starts
   * the agent anew.
   */
  agent_reuse: boolean;
  /** A kept agent is restarted after serving this many samples. */
  agent_max_samples: number;
  /** A kept agent is restarted once it has run this many seconds. */
  agent_max_age: number;
  /** A kept agent is restarted once its processes hold more than this many MiB of memory (RSS). */
  agent_max_rss_mb: number;
}

/** Class defaults (the CLI reads the environment instead, see {@link blackboxConfigFromEnv}). */
export const defaultBlackboxConfig: BlackboxServerConfig = {
  host: '127.0.0.1',
  port: 8080,
  runtime_root: '/tmp/blackbox_server',
  max_sessions: 1,
  max_turns: 200,
  backend_timeout: 960,
  execute_cmd_timeout: 600,
  router_timeout: 600_000,
  shutdown_timeout: 30,
  runtime_health_check_interval: 10,
  runtime_health_check_retries: 5,
  runtime_health_check_retry_delay: 1,
  inside_sandbox: false,
  max_request_bytes: 16 * 1024 ** 2,
  agent_reuse: true,
  agent_max_samples: 100,
  agent_max_age: 3600,
  agent_max_rss_mb: 2048,
};

function number(env: NodeJS.ProcessEnv, key: string, fallback: number): number {
  const raw = env[key];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${key}=${raw} is not a number`,
      details: { key },
    });
  }
  return value;
}

function flag(env: NodeJS.ProcessEnv, key: string, fallback: boolean): boolean {
  const raw = env[key];
  if (raw === undefined || raw === '') return fallback;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new DressageError({
    code: 'invalid_argument',
    message: `${key}=${raw} is not a boolean (1/0, true/false, yes/no, on/off)`,
    details: { key },
  });
}

/**
 * Reads the `BBS_*` environment variables (with the CLI defaults: port 23456, 3 retries, 0.5 s
 * delay). `BBS_INSIDE_SANDBOX=1` says the server runs inside a sandbox; `BBS_MAX_REQUEST_MB` bounds
 * request bodies; `BBS_AGENT_REUSE`, `BBS_AGENT_MAX_SAMPLES`, `BBS_AGENT_MAX_AGE` and
 * `BBS_AGENT_MAX_RSS_MB` set the kept agent's reuse and budgets.
 */
export function blackboxConfigFromEnv(env: NodeJS.ProcessEnv = process.env): BlackboxServerConfig {
  return {
    host: env.BBS_HOST || '127.0.0.1',
    port: number(env, 'BBS_PORT', 23456),
    runtime_root: env.BBS_RUNTIME_ROOT ?? '/tmp/blackbox_server',
    max_sessions: number(env, 'BBS_MAX_SESSIONS', 1),
    max_turns: number(env, 'BBS_MAX_TURNS', 200),
    backend_timeout: number(env, 'BBS_BACKEND_TIMEOUT', 960),
    execute_cmd_timeout: number(env, 'BBS_EXECUTE_CMD_TIMEOUT', 600),
    router_timeout: number(env, 'BBS_ROUTER_TIMEOUT', 600_000),
    shutdown_timeout: number(env, 'BBS_SHUTDOWN_TIMEOUT', 30),
    runtime_health_check_interval: number(env, 'BBS_RUNTIME_HEALTH_CHECK_INTERVAL', 10),
    runtime_health_check_retries: number(env, 'BBS_RUNTIME_HEALTH_CHECK_RETRIES', 3),
    runtime_health_check_retry_delay: number(env, 'BBS_RUNTIME_HEALTH_CHECK_RETRY_DELAY', 0.5),
    inside_sandbox: /^(1|true|yes)$/i.test(env.BBS_INSIDE_SANDBOX ?? ''),
    max_request_bytes: Math.floor(number(env, 'BBS_MAX_REQUEST_MB', 16) * 1024 ** 2),
    agent_reuse: flag(env, 'BBS_AGENT_REUSE', defaultBlackboxConfig.agent_reuse),
    agent_max_samples: number(env, 'BBS_AGENT_MAX_SAMPLES', defaultBlackboxConfig.agent_max_samples),
    agent_max_age: number(env, 'BBS_AGENT_MAX_AGE', defaultBlackboxConfig.agent_max_age),
    agent_max_rss_mb: number(env, 'BBS_AGENT_MAX_RSS_MB', defaultBlackboxConfig.agent_max_rss_mb),
  };
}

/**
 * The bearer key the server requires, from `BBS_API_KEY_FILE` (a file; `/dev/stdin` reads a key a
 * parent wrote to the server's stdin) or `BBS_API_KEY`. Undefined: no key, every caller that
 * reaches the port is trusted.
 */
export function blackboxApiKeyFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return readSecret({ file: env.BBS_API_KEY_FILE, environment: env.BBS_API_KEY, label: 'BBS_API_KEY_FILE' });
}
