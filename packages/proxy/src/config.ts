import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DressageError, readSecret } from '@dressage/protocol';
import type { StoreFsyncPolicy } from './trajectory-store.js';

/** How prompts are tokenized: incremental TITO (default) or a full re-render per request. */
export type TokenBuildMode = 'tito' | 'snapshot';
/** Where tool calls and reasoning are parsed. */
export type ParseBackend = 'local' | 'sglang_api' | 'hybrid';
/**
 * Renderer family of the prompt: `qwen3_5` (XML tool calls) and `qwen3` (JSON tool calls) are fixed
 * renderers checked against the template in force; `qwen3_6` renders with that template itself.
 */
export type TokenBuildModel = 'qwen3_5' | 'qwen3_6' | 'qwen3';
/** Element type of routed-expert ids. */
export type RoutedExpertsDtype = 'int32' | 'uint16' | 'uint8';

/** Everything the proxy is configured with; the CLI flags of §1.11 plus the store options. */
export interface ProxyConfig {
  sglangRouterUrl: string;
  tokenizerPath: string;
  /**
   * A Jinja chat template file that replaces the model directory's (SGLang's `--chat-template`);
   * null renders with the directory's own template.
   */
  chatTemplate: string | null;
  /** Listen address. Default 127.0.0.1: another address (`0.0.0.0`) is a deliberate choice. */
  host: string;
  port: number;
  maxOutputTokens: number | null;
  contextWindow: number | null;
  dynamicMaxTokens: boolean;
  rolloutTemperature: number;
  useRolloutRoutingReplay: boolean;
  routedExpertsDtype: RoutedExpertsDtype;
  modelMaskType: string;
  modelToolCallType: string;
  toolCallParseBackend: ParseBackend;
  modelReasoningType: string;
  reasoningParseBackend: ParseBackend;
  /**
   * Bearer key every endpoint but `/health` requires; `no-auth` disables authentication. The CLI
   * reads it from `--api-key-file` or `DRESSAGE_PROXY_API_KEY` as well as `--api-key` (which `ps`
   * shows to every user of the machine).
   */
  apiKey: string;
  minGroupSize: number;
  sessionTimeoutSeconds: number;
  groupTimeoutSeconds: number;
  tokenBuildMode: TokenBuildMode;
  tokenBuildModel: TokenBuildModel;
  titoModel: TokenBuildModel;
  recordTokenVersions: boolean;
  maskNonlastVersionTokens: boolean;
  partialRollout: boolean;
  maxPartialRolloutPreempts: number | null;
  streamHeartbeatIntervalSeconds: number;
  /** Directory of the append-only trajectory log; null keeps finalized trajectories in memory only. */
  storeDirectory: string | null;
  /** Resident token bytes the store keeps before it evicts persisted trajectories to disk. */
  storeMemoryLimitBytes: number;
  /** `always`: finalize answers once the trajectory is flushed to stable storage; `never`: once the kernel has it. */
  storeFsync: StoreFsyncPolicy;
  /** Largest accepted request body. */
  maxRequestBytes: number;
  /** How long `/v1/rollout/resume` waits for a healthy worker. */
  resumeReadinessTimeoutSeconds: number;
  /** Timeout of one engine `/generate` call (504 past it); null waits as long as the engine takes. */
  engineRequestTimeoutSeconds: number | null;
  /** Time a client has to send a request's body (408 past it); null waits as long as it takes. */
  requestBodyTimeoutSeconds: number | null;
  /** `--tool-call-hooks` entries (`MODULE[:EXPORT]`), imported when the server starts. */
  toolCallHooks: string[];
  /** Timeout of each `before`-stage hook run in seconds; null waits as long as the hook takes. */
  toolCallHookBeforeTimeoutSeconds: number | null;
}

/** The router address the reference derives when `--sglang-router-url` is absent. */
export function defaultRouterUrl(env: NodeJS.ProcessEnv = process.env): string {
  if (env.SGLANG_ROUTER_URL) return env.SGLANG_ROUTER_URL;
  const host = env.SGLANG_ROUTER_HOST || env.MASTER_ADDR || hostAddress();
  return `http://${host}:${env.SGLANG_ROUTER_PORT || '8000'}`;
}

function hostAddress(): string {
  for (const addresses of Object.values(networkInterfaces())) {
    for (const address of addresses ?? []) {
      if (address.family === 'IPv4' && !address.internal) return address.address;
    }
  }
  return '127.0.0.1';
}

/** A complete configuration from defaults plus `overrides` (tests and embedding use this). */
export function createProxyConfig(
  overrides: Partial<ProxyConfig> & Pick<ProxyConfig, 'tokenizerPath'>,
): ProxyConfig {
  const tokenBuildModel = overrides.tokenBuildModel ?? 'qwen3_5';
  return {
    sglangRouterUrl: overrides.sglangRouterUrl ?? 'http://127.0.0.1:8000',
    chatTemplate: null,
    host: '127.0.0.1',
    port: 8800,
    maxOutputTokens: null,
    contextWindow: null,
    dynamicMaxTokens: true,
    rolloutTemperature: 1.0,
    useRolloutRoutingReplay: false,
    routedExpertsDtype: 'int32',
    modelMaskType: tokenBuildModel,
    modelToolCallType: tokenBuildModel,
    toolCallParseBackend: 'sglang_api',
    modelReasoningType: 'qwen3',
    reasoningParseBackend: 'sglang_api',
    apiKey: 'no-auth',
    minGroupSize: 1,
    sessionTimeoutSeconds: 3200,
    groupTimeoutSeconds: 300,
    tokenBuildMode: 'tito',
    titoModel: tokenBuildModel,
    recordTokenVersions: false,
    maskNonlastVersionTokens: false,
    partialRollout: false,
    maxPartialRolloutPreempts: null,
    streamHeartbeatIntervalSeconds: 15,
    storeDirectory: null,
    storeMemoryLimitBytes: 4 * 1024 ** 3,
    storeFsync: 'always',
    // 4 MiB: a new session's body is parsed, validated, rendered and tokenized on the event loop
    // (JSON.parse is under 5% of it), about 0.25 s per MiB of agent history; 16 MiB held every other
    // call for 4 to 8 s. 4 MiB of text is 0.8 to 2 million Qwen3 tokens, several 256K-token contexts.
    maxRequestBytes: 4 * 1024 ** 2,
    resumeReadinessTimeoutSeconds: 30,
    engineRequestTimeoutSeconds: 3600,
    requestBodyTimeoutSeconds: 60,
    toolCallHooks: [],
    toolCallHookBeforeTimeoutSeconds: null,
    ...overrides,
    tokenBuildModel,
  };
}

const options = {
  'sglang-router-url': { type: 'string' },
  'tokenizer-path': { type: 'string' },
  'chat-template': { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string' },
  'max-output-tokens': { type: 'string' },
  'context-window': { type: 'string' },
  'no-dynamic-max-tokens': { type: 'boolean' },
  'rollout-temperature': { type: 'string' },
  'use-rollout-routing-replay': { type: 'boolean' },
  'routed-experts-dtype': { type: 'string' },
  'model-mask-type': { type: 'string' },
  'model-tool-call-type': { type: 'string' },
  'tool-call-parse-backend': { type: 'string' },
  'model-reasoning-type': { type: 'string' },
  'reasoning-parse-backend': { type: 'string' },
  'api-key': { type: 'string' },
  'api-key-file': { type: 'string' },
  'min-group-size': { type: 'string' },
  'session-timeout': { type: 'string' },
  'group-timeout': { type: 'string' },
  'token-build-mode': { type: 'string' },
  'token-build-model': { type: 'string' },
  'tito-model': { type: 'string' },
  'record-token-versions': { type: 'boolean' },
  'mask-nonlast-version-tokens': { type: 'boolean' },
  'dressage-partial-rollout': { type: 'boolean' },
  'max-partial-rollout-preempts': { type: 'string' },
  'stream-heartbeat-interval-seconds': { type: 'string' },
  'enable-transfer-queue': { type: 'boolean' },
  'transfer-queue-config': { type: 'string' },
  'transfer-queue-retention-seconds': { type: 'string' },
  'transfer-params': { type: 'string' },
  'tool-call-hooks': { type: 'string', multiple: true },
  'tool-call-hook-before-timeout': { type: 'string' },
  'store-dir': { type: 'string' },
  'store-memory-limit-mb': { type: 'string' },
  'store-fsync': { type: 'string' },
  'max-request-mb': { type: 'string' },
  'engine-request-timeout': { type: 'string' },
  'request-body-timeout': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** The `--help` text of `dressage-proxy`. */
export const usage = `Usage: dressage-proxy --tokenizer-path DIR [options]

  --sglang-router-url URL            SGLang router (env SGLANG_ROUTER_URL, else http://HOST:8000)
  --tokenizer-path DIR               local Hugging Face model directory (required)
  --chat-template FILE               Jinja chat template replacing the model directory's
  --host 127.0.0.1 --port 8800      listen address (0.0.0.0 listens on every interface)
  --max-output-tokens N              cap on generated tokens per call
  --context-window N                 prompt + output budget (413 beyond it)
  --no-dynamic-max-tokens            do not clamp max_new_tokens to the context window
  --rollout-temperature 1.0
  --use-rollout-routing-replay       record routed experts (R3)
  --routed-experts-dtype int32       int32 | uint16 | uint8
  --model-mask-type / --model-tool-call-type / --model-reasoning-type
  --tool-call-parse-backend sglang_api   local | sglang_api | hybrid
  --reasoning-parse-backend sglang_api   local | sglang_api | hybrid
  --api-key-file FILE                bearer key from a file (env DRESSAGE_PROXY_API_KEY; --api-key KEY
                                     also works but shows the key to ps); no-auth (default) disables auth
  --min-group-size 1 --group-timeout 300 --session-timeout 3200
  --token-build-mode tito            tito | snapshot
  --token-build-model qwen3_5        qwen3_5 | qwen3_6 | qwen3 (--tito-model overrides); must
                                     reproduce the chat template in force, else the proxy refuses
  --record-token-versions --mask-nonlast-version-tokens
  --dressage-partial-rollout --max-partial-rollout-preempts N
  --stream-heartbeat-interval-seconds 15 (0 = off)
  --tool-call-hooks MODULE[:EXPORT],...  tool-call hooks to import (file path or package; repeatable)
  --tool-call-hook-before-timeout S  timeout of each before-stage hook run
  --store-dir DIR                    trajectory log (env DRESSAGE_PROXY_STORE_DIR; "none" = memory only)
  --store-memory-limit-mb 4096       resident token data before persisted trajectories are evicted
  --store-fsync always               always: flush each finalized trajectory to disk before 200 (survives
                                     power loss); never: leave flushing to the kernel (survives a crash)
  --max-request-mb 4                 largest request body (413 above it)
  --request-body-timeout 60          seconds a client has to send a request body (408 past it; 0 = no limit)
  --engine-request-timeout 3600      seconds an engine /generate may take (504 past it; 0 = no limit)
`;

function invalid(flag: string, message: string): DressageError {
  return new DressageError({ code: 'invalid_argument', message: `--${flag}: ${message}`, details: { flag } });
}

function numberFlag(
  flag: string,
  value: string | undefined,
  check: { integer?: boolean; min?: number; exclusiveMin?: number },
): number | undefined {
  if (value === undefined) return undefined;
  const parsed = Number(value);
  if (value.trim() === '' || !Number.isFinite(parsed))
    throw invalid(flag, `expected a number, got ${JSON.stringify(value)}`);
  if (check.integer && !Number.isInteger(parsed)) throw invalid(flag, `expected an integer, got ${value}`);
  if (check.min !== undefined && parsed < check.min) throw invalid(flag, `must be >= ${check.min}`);
  if (check.exclusiveMin !== undefined && parsed <= check.exclusiveMin)
    throw invalid(flag, `must be > ${check.exclusiveMin}`);
  return parsed;
}

function choice<T extends string>(
  flag: string,
  value: string | undefined,
  allowed: readonly T[],
): T | undefined {
  if (value === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(value)) {
    throw invalid(flag, `expected one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value as T;
}

/** The result of parsing the command line: a configuration, or a request for help. */
export type ParsedArguments = { help: true } | { help: false; config: ProxyConfig };

/**
 * Parses `dressage-proxy` arguments (§1.11 of the reference) and environment variables.
 *
 * @throws DressageError `invalid_argument` naming the bad flag.
 */
export function parseProxyArguments(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): ParsedArguments {
  let values: Record<string, string | boolean | string[] | undefined>;
  try {
    values = parseArgs({ args: [...argv], options, strict: true, allowPositionals: false }).values;
  } catch (error) {
    throw new DressageError({ code: 'invalid_argument', message: (error as Error).message, cause: error });
  }
  if (values.help) return { help: true };
  const text = (flag: string) => values[flag] as string | undefined;
  const flag = (name: string) => values[name] === true;
  const tokenizerPath = text('tokenizer-path');
  if (!tokenizerPath) throw invalid('tokenizer-path', 'is required');

  const transferQueue =
    flag('enable-transfer-queue') || /^(1|true|yes)$/i.test(env.DRESSAGE_ENABLE_TRANSFER_QUEUE ?? '');
  if (transferQueue) {
    throw invalid('enable-transfer-queue', 'the TransferQueue data plane is not supported by this proxy');
  }
  const hookEntries = ((values['tool-call-hooks'] as string[] | undefined) ?? [])
    .flatMap((entry) => entry.split(/[\s,]+/))
    .filter(Boolean);

  const models = ['qwen3_5', 'qwen3_6', 'qwen3'] as const;
  const tokenBuildModel = choice('token-build-model', text('token-build-model'), models);
  const titoModel = choice('tito-model', text('tito-model'), models);
  const chatTemplate = text('chat-template');
  if (chatTemplate === '') throw invalid('chat-template', 'expected a file path');
  const backends = ['local', 'sglang_api', 'hybrid'] as const;
  const storeFlag = text('store-dir') ?? env.DRESSAGE_PROXY_STORE_DIR;
  const storeDirectory =
    storeFlag === undefined
      ? join(process.cwd(), '.dressage', 'proxy-store')
      : storeFlag === 'none'
        ? null
        : storeFlag;
  const overrides: Partial<ProxyConfig> & Pick<ProxyConfig, 'tokenizerPath'> = {
    tokenizerPath,
    sglangRouterUrl: text('sglang-router-url') ?? defaultRouterUrl(env),
    storeDirectory,
  };
  const set = <K extends keyof ProxyConfig>(key: K, value: ProxyConfig[K] | undefined) => {
    if (value !== undefined) overrides[key] = value;
  };
  set('chatTemplate', chatTemplate);
  set('host', text('host'));
  set('port', numberFlag('port', text('port'), { integer: true, min: 0 }));
  set(
    'maxOutputTokens',
    numberFlag('max-output-tokens', text('max-output-tokens'), { integer: true, exclusiveMin: 0 }),
  );
  set(
    'contextWindow',
    numberFlag('context-window', text('context-window'), { integer: true, exclusiveMin: 0 }),
  );
  if (flag('no-dynamic-max-tokens')) overrides.dynamicMaxTokens = false;
  set('rolloutTemperature', numberFlag('rollout-temperature', text('rollout-temperature'), { min: 0 }));
  if (flag('use-rollout-routing-replay')) overrides.useRolloutRoutingReplay = true;
  set(
    'routedExpertsDtype',
    choice('routed-experts-dtype', text('routed-experts-dtype'), ['int32', 'uint16', 'uint8']),
  );
  set('modelMaskType', text('model-mask-type') ?? tokenBuildModel);
  set('modelToolCallType', text('model-tool-call-type') ?? tokenBuildModel);
  set('toolCallParseBackend', choice('tool-call-parse-backend', text('tool-call-parse-backend'), backends));
  set('modelReasoningType', text('model-reasoning-type'));
  set('reasoningParseBackend', choice('reasoning-parse-backend', text('reasoning-parse-backend'), backends));
  set(
    'apiKey',
    readSecret({
      value: text('api-key'),
      file: text('api-key-file'),
      environment: env.DRESSAGE_PROXY_API_KEY,
      label: text('api-key') === undefined ? '--api-key-file' : '--api-key',
    }),
  );
  set('minGroupSize', numberFlag('min-group-size', text('min-group-size'), { integer: true, min: 1 }));
  set('sessionTimeoutSeconds', numberFlag('session-timeout', text('session-timeout'), { exclusiveMin: 0 }));
  set('groupTimeoutSeconds', numberFlag('group-timeout', text('group-timeout'), { min: 0 }));
  set('tokenBuildMode', choice('token-build-mode', text('token-build-mode'), ['tito', 'snapshot'] as const));
  set('tokenBuildModel', tokenBuildModel);
  set('titoModel', titoModel ?? tokenBuildModel);
  if (flag('record-token-versions')) overrides.recordTokenVersions = true;
  if (flag('mask-nonlast-version-tokens')) overrides.maskNonlastVersionTokens = true;
  if (flag('dressage-partial-rollout')) overrides.partialRollout = true;
  set(
    'maxPartialRolloutPreempts',
    numberFlag('max-partial-rollout-preempts', text('max-partial-rollout-preempts'), {
      integer: true,
      min: 0,
    }),
  );
  set(
    'streamHeartbeatIntervalSeconds',
    numberFlag('stream-heartbeat-interval-seconds', text('stream-heartbeat-interval-seconds'), { min: 0 }),
  );
  const memoryMb = numberFlag('store-memory-limit-mb', text('store-memory-limit-mb'), { exclusiveMin: 0 });
  if (memoryMb !== undefined) overrides.storeMemoryLimitBytes = Math.floor(memoryMb * 1024 ** 2);
  set('storeFsync', choice('store-fsync', text('store-fsync'), ['always', 'never'] as const));
  if (hookEntries.length > 0) overrides.toolCallHooks = hookEntries;
  set(
    'toolCallHookBeforeTimeoutSeconds',
    numberFlag('tool-call-hook-before-timeout', text('tool-call-hook-before-timeout'), { exclusiveMin: 0 }),
  );
  const seconds = (flag: string) => {
    const value = numberFlag(flag, text(flag), { min: 0 });
    return value === undefined ? undefined : value === 0 ? null : value;
  };
  const engineTimeout = seconds('engine-request-timeout');
  if (engineTimeout !== undefined) overrides.engineRequestTimeoutSeconds = engineTimeout;
  const bodyTimeout = seconds('request-body-timeout');
  if (bodyTimeout !== undefined) overrides.requestBodyTimeoutSeconds = bodyTimeout;
  const requestMb = numberFlag('max-request-mb', text('max-request-mb'), { exclusiveMin: 0 });
  if (requestMb !== undefined) overrides.maxRequestBytes = Math.floor(requestMb * 1024 ** 2);
  return { help: false, config: createProxyConfig(overrides) };
}
