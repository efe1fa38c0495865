import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DressageError } from '@dressage/protocol';
import { readSecret } from '@dressage/protocol/internal';
import { z } from 'zod';

// Every setting of the proxy is one field of `proxyConfigSchema`: its type, range and default are the
// zod schema, and where it is read from (flag, environment variable) and its line of `--help` are
// registered beside it. Precedence, for the CLI: a flag beats its environment variable, which beats
// the default. `createProxyConfig` (tests, embedding) reads neither flags nor the environment.

/** How the text of a flag or an environment variable becomes a setting's value. */
type TextKind =
  /** The text as is. */
  | 'text'
  /** A finite number. */
  | 'number'
  /** A flag without a value that turns the setting on. */
  | 'switch'
  /** A flag without a value that turns the setting off. */
  | 'negated-switch'
  /** Entries separated by commas or spaces; the flag may repeat. */
  | 'list'
  /** Mebibytes, stored as bytes. */
  | 'mebibytes'
  /** Seconds; 0 means no limit (null). */
  | 'seconds-or-unlimited'
  /** A path; `none` means none (null). */
  | 'path-or-none';

/** Where a setting is read from and how `--help` describes it. */
interface SettingSource {
  /** The flag, without its dashes. */
  flag?: string;
  /** The environment variable read when the flag is absent. */
  env?: string;
  kind: TextKind;
  /** What `--help` shows after the flag (`N`, `URL`, ...). */
  placeholder?: string;
  /** One line of `--help`. */
  help: string;
  /** The default `--help` shows when the CLI derives its own (the schema's is the library's). */
  cliDefault?: string;
}

const sources = new Map<z.ZodType, SettingSource>();

function setting<T extends z.ZodType>(schema: T, source: SettingSource): T {
  sources.set(schema, source);
  return schema;
}

const renderers = ['qwen3_5', 'qwen3_6', 'qwen3'] as const;
const parseBackends = ['local', 'sglang_api', 'hybrid'] as const;

/**
 * The proxy's settings: the CLI flags of §1.11 plus the store options. Defaults are the library's;
 * the CLI also derives the router address and the store directory (see {@link parseProxyArguments}).
 */
export const proxyConfigSchema = z
  .object({
    sglangRouterUrl: setting(z.string().min(1).default('http://127.0.0.1:8000'), {
      flag: 'sglang-router-url',
      env: 'SGLANG_ROUTER_URL',
      kind: 'text',
      placeholder: 'URL',
      help: 'SGLang router',
      cliDefault: 'http://$SGLANG_ROUTER_HOST|$MASTER_ADDR|host IP:$SGLANG_ROUTER_PORT|8000',
    }),
    tokenizerPath: setting(z.string().min(1), {
      flag: 'tokenizer-path',
      kind: 'text',
      placeholder: 'DIR',
      help: 'local Hugging Face model directory (required)',
    }),
    /** A Jinja chat template file replacing the model directory's (SGLang's `--chat-template`). */
    chatTemplate: setting(z.string().min(1, 'expected a file path').nullable().default(null), {
      flag: 'chat-template',
      kind: 'text',
      placeholder: 'FILE',
      help: "Jinja chat template replacing the model directory's",
    }),
    /** Listen address. Default 127.0.0.1: another address (`0.0.0.0`) is a deliberate choice. */
    host: setting(z.string().min(1).default('127.0.0.1'), {
      flag: 'host',
      kind: 'text',
      placeholder: 'ADDRESS',
      help: 'listen address (0.0.0.0 listens on every interface)',
    }),
    port: setting(z.int().min(0).default(8800), {
      flag: 'port',
      kind: 'number',
      placeholder: 'N',
      help: 'listen port',
    }),
    maxOutputTokens: setting(z.int().positive().nullable().default(null), {
      flag: 'max-output-tokens',
      kind: 'number',
      placeholder: 'N',
      help: 'cap on generated tokens per call',
    }),
    contextWindow: setting(z.int().positive().nullable().default(null), {
      flag: 'context-window',
      kind: 'number',
      placeholder: 'N',
      help: 'prompt + output budget (413 beyond it)',
    }),
    dynamicMaxTokens: setting(z.boolean().default(true), {
      flag: 'no-dynamic-max-tokens',
      kind: 'negated-switch',
      help: 'do not clamp max_new_tokens to the context window',
    }),
    rolloutTemperature: setting(z.number().min(0).default(1), {
      flag: 'rollout-temperature',
      kind: 'number',
      placeholder: 'T',
      help: 'sampling temperature of rollouts',
    }),
    useRolloutRoutingReplay: setting(z.boolean().default(false), {
      flag: 'use-rollout-routing-replay',
      kind: 'switch',
      help: 'record routed experts (R3)',
    }),
    routedExpertsDtype: setting(z.enum(['int32', 'uint16', 'uint8']).default('int32'), {
      flag: 'routed-experts-dtype',
      kind: 'text',
      placeholder: 'int32|uint16|uint8',
      help: 'element type of recorded routed experts',
    }),
    /** Default: the token build model. */
    modelMaskType: setting(z.string().min(1).optional(), {
      flag: 'model-mask-type',
      kind: 'text',
      placeholder: 'TYPE',
      help: 'assistant-mask renderer (default: the token build model)',
    }),
    /** Default: the token build model. */
    modelToolCallType: setting(z.string().min(1).optional(), {
      flag: 'model-tool-call-type',
      kind: 'text',
      placeholder: 'TYPE',
      help: 'tool-call parser (default: the token build model)',
    }),
    toolCallParseBackend: setting(z.enum(parseBackends).default('sglang_api'), {
      flag: 'tool-call-parse-backend',
      kind: 'text',
      placeholder: 'local|sglang_api|hybrid',
      help: 'where tool calls are parsed',
    }),
    modelReasoningType: setting(z.string().min(1).default('qwen3'), {
      flag: 'model-reasoning-type',
      kind: 'text',
      placeholder: 'TYPE',
      help: 'reasoning parser',
    }),
    reasoningParseBackend: setting(z.enum(parseBackends).default('sglang_api'), {
      flag: 'reasoning-parse-backend',
      kind: 'text',
      placeholder: 'local|sglang_api|hybrid',
      help: 'where reasoning is parsed',
    }),
    /**
     * Bearer key every endpoint but `/health` requires; `no-auth` disables authentication. The CLI
     * reads it from `--api-key-file` or `DRESSAGE_PROXY_API_KEY` as well as `--api-key` (which `ps`
     * shows to every user of the machine).
     */
    apiKey: setting(z.string().min(1).default('no-auth'), {
      flag: 'api-key',
      env: 'DRESSAGE_PROXY_API_KEY',
      kind: 'text',
      placeholder: 'KEY',
      help: 'bearer key (prefer --api-key-file: ps shows argv); no-auth disables auth',
    }),
    minGroupSize: setting(z.int().min(1).default(1), {
      flag: 'min-group-size',
      kind: 'number',
      placeholder: 'N',
      help: 'trajectories of an instance before batch mode reads it',
    }),
    sessionTimeoutSeconds: setting(z.number().positive().default(3200), {
      flag: 'session-timeout',
      kind: 'number',
      placeholder: 'S',
      help: 'idle seconds before a session is dropped',
    }),
    groupTimeoutSeconds: setting(z.number().min(0).default(300), {
      flag: 'group-timeout',
      kind: 'number',
      placeholder: 'S',
      help: 'seconds before batch mode reads an incomplete group',
    }),
    tokenBuildMode: setting(z.enum(['tito', 'snapshot']).default('tito'), {
      flag: 'token-build-mode',
      kind: 'text',
      placeholder: 'tito|snapshot',
      help: 'incremental tokenization or a full re-render per request',
    }),
    /**
     * Renderer family of the prompt: `qwen3_5` (XML tool calls) and `qwen3` (JSON tool calls) are
     * fixed renderers checked against the template in force; `qwen3_6` renders with that template.
     */
    tokenBuildModel: setting(z.enum(renderers).default('qwen3_5'), {
      flag: 'token-build-model',
      kind: 'text',
      placeholder: 'qwen3_5|qwen3_6|qwen3',
      help: 'prompt renderer; must reproduce the chat template in force, else the proxy refuses',
    }),
    /** Default: the token build model. */
    titoModel: setting(z.enum(renderers).optional(), {
      flag: 'tito-model',
      kind: 'text',
      placeholder: 'qwen3_5|qwen3_6|qwen3',
      help: 'TITO renderer (default: the token build model)',
    }),
    recordTokenVersions: setting(z.boolean().default(false), {
      flag: 'record-token-versions',
      kind: 'switch',
      help: 'record the weight version of every token',
    }),
    maskNonlastVersionTokens: setting(z.boolean().default(false), {
      flag: 'mask-nonlast-version-tokens',
      kind: 'switch',
      help: 'train only the last weight version of a multi-version segment',
    }),
    partialRollout: setting(z.boolean().default(false), {
      flag: 'dressage-partial-rollout',
      kind: 'switch',
      help: 'keep a preempted generation and continue it after resume',
    }),
    maxPartialRolloutPreempts: setting(z.int().min(0).nullable().default(null), {
      flag: 'max-partial-rollout-preempts',
      kind: 'number',
      placeholder: 'N',
      help: 'preemptions a partial rollout survives',
    }),
    streamHeartbeatIntervalSeconds: setting(z.number().min(0).default(15), {
      flag: 'stream-heartbeat-interval-seconds',
      kind: 'number',
      placeholder: 'S',
      help: 'keep-alive comment frames of slow streams (0 = off)',
    }),
    /** Directory of the append-only trajectory log; null keeps finalized trajectories in memory only. */
    storeDirectory: setting(z.string().min(1).nullable().default(null), {
      flag: 'store-dir',
      env: 'DRESSAGE_PROXY_STORE_DIR',
      kind: 'path-or-none',
      placeholder: 'DIR',
      help: 'trajectory log ("none" = memory only)',
      cliDefault: './.dressage/proxy-store/<run id>',
    }),
    /**
     * The run this proxy records for. The store keeps the id of the run that wrote it and refuses
     * another run's store unless {@link ProxyConfig.adoptStore}; null takes the store's own run (or
     * starts a new one in an empty store).
     */
    runId: setting(
      z
        .string()
        .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/, 'letters, digits, ".", "_" and "-", at most 128')
        .nullable()
        .default(null),
      {
        flag: 'run-id',
        env: 'DRESSAGE_RUN_ID',
        kind: 'text',
        placeholder: 'ID',
        help: 'the run recorded for; a store another run wrote is refused (default: a new id per start)',
      },
    ),
    /** Take over a store another run wrote: its trajectories are served to this run. */
    adoptStore: setting(z.boolean().default(false), {
      flag: 'adopt-store',
      kind: 'switch',
      help: "serve the trajectories of the store's earlier run to this one",
    }),
    /** Resident token bytes the store keeps before it evicts persisted trajectories to disk. */
    storeMemoryLimitBytes: setting(
      z
        .int()
        .positive()
        .default(4 * 1024 ** 3),
      {
        flag: 'store-memory-limit-mb',
        kind: 'mebibytes',
        placeholder: 'MB',
        help: 'resident token data before persisted trajectories are evicted',
      },
    ),
    /** `always`: finalize answers once the trajectory is on stable storage; `never`: once the kernel has it. */
    storeFsync: setting(z.enum(['always', 'never']).default('always'), {
      flag: 'store-fsync',
      kind: 'text',
      placeholder: 'always|never',
      help: 'always: flush each trajectory before 200 (survives power loss); never: survives a crash',
    }),
    // 4 MiB: a new session's body is parsed, validated, rendered and tokenized on the event loop
    // (JSON.parse is under 5% of it), about 0.25 s per MiB of agent history; 16 MiB held every other
    // call for 4 to 8 s. 4 MiB of text is 0.8 to 2 million Qwen3 tokens, several 256K-token contexts.
    /** Largest accepted request body. */
    maxRequestBytes: setting(
      z
        .int()
        .positive()
        .default(4 * 1024 ** 2),
      {
        flag: 'max-request-mb',
        kind: 'mebibytes',
        placeholder: 'MB',
        help: 'largest request body (413 above it)',
      },
    ),
    /** How long `/v1/rollout/resume` waits for a healthy worker. */
    resumeReadinessTimeoutSeconds: z.number().positive().default(30),
    /** Timeout of one engine `/generate` call (504 past it); null waits as long as the engine takes. */
    engineRequestTimeoutSeconds: setting(z.number().positive().nullable().default(3600), {
      flag: 'engine-request-timeout',
      kind: 'seconds-or-unlimited',
      placeholder: 'S',
      help: 'seconds an engine /generate may take (504 past it; 0 = no limit)',
    }),
    /** Time a client has to send a request's body (408 past it); null waits as long as it takes. */
    requestBodyTimeoutSeconds: setting(z.number().positive().nullable().default(60), {
      flag: 'request-body-timeout',
      kind: 'seconds-or-unlimited',
      placeholder: 'S',
      help: 'seconds a client has to send a request body (408 past it; 0 = no limit)',
    }),
    /** `--tool-call-hooks` entries (`MODULE[:EXPORT]`), imported when the server starts. */
    toolCallHooks: setting(z.array(z.string().min(1)).default([]), {
      flag: 'tool-call-hooks',
      kind: 'list',
      placeholder: 'MODULE[:EXPORT],...',
      help: 'tool-call hooks to import (file path or package; repeatable)',
    }),
    /** Timeout of each `before`-stage hook run in seconds; null waits as long as the hook takes. */
    toolCallHookBeforeTimeoutSeconds: setting(z.number().positive().nullable().default(null), {
      flag: 'tool-call-hook-before-timeout',
      kind: 'number',
      placeholder: 'S',
      help: 'timeout of each before-stage hook run',
    }),
    /** Steps a session may record before further inference is refused (400); 0 = no limit. */
    maxStepsPerSession: setting(z.int().min(0).default(0), {
      env: 'DRESSAGE_PROXY_MAX_STEPS_PER_SESSION',
      kind: 'number',
      help: 'steps a session may record (0 = no limit)',
    }),
  })
  .transform((config) => ({
    ...config,
    modelMaskType: config.modelMaskType ?? config.tokenBuildModel,
    modelToolCallType: config.modelToolCallType ?? config.tokenBuildModel,
    titoModel: config.titoModel ?? config.tokenBuildModel,
  }));

/** Everything the proxy is configured with (see {@link proxyConfigSchema}). */
export type ProxyConfig = z.output<typeof proxyConfigSchema>;
/** Settings as a caller writes them: only `tokenizerPath` is required. */
export type ProxyConfigInput = z.input<typeof proxyConfigSchema>;
/** How prompts are tokenized: incremental TITO (default) or a full re-render per request. */
export type TokenBuildMode = ProxyConfig['tokenBuildMode'];
/** Where tool calls and reasoning are parsed. */
export type ParseBackend = ProxyConfig['toolCallParseBackend'];
/** Renderer family of the prompt (see {@link proxyConfigSchema}). */
export type TokenBuildModel = ProxyConfig['tokenBuildModel'];
/** Element type of routed-expert ids: the protocol's, which the config's enum lists. */
export type { RoutedExpertsDtype } from '@dressage/protocol';

const fields = proxyConfigSchema.in.shape;
type FieldName = keyof typeof fields;

// Flags the reference accepts besides the settings: the key file, and the TransferQueue data plane,
// which this proxy refuses (its configuration flags are accepted and ignored).
const extraFlags = {
  'api-key-file': { type: 'string' },
  'enable-transfer-queue': { type: 'boolean' },
  'transfer-queue-config': { type: 'string' },
  'transfer-queue-retention-seconds': { type: 'string' },
  'transfer-params': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

interface FlagOption {
  type: 'string' | 'boolean';
  multiple?: boolean;
  short?: string;
}

const settingSources: [FieldName, SettingSource][] = Object.entries(fields).flatMap(([name, field]) => {
  const source = sources.get(field);
  return source === undefined ? [] : [[name as FieldName, source]];
});

const flagOptions: Record<string, FlagOption> = { ...extraFlags };
for (const [, source] of settingSources) {
  if (source.flag === undefined) continue;
  const kind = source.kind;
  flagOptions[source.flag] =
    kind === 'switch' || kind === 'negated-switch'
      ? { type: 'boolean' }
      : kind === 'list'
        ? { type: 'string', multiple: true }
        : { type: 'string' };
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

/**
 * A complete configuration from the defaults plus `overrides` (tests and embedding use this), checked
 * against {@link proxyConfigSchema}.
 *
 * @throws DressageError `invalid_argument` naming the setting.
 */
export function createProxyConfig(overrides: ProxyConfigInput): ProxyConfig {
  const result = proxyConfigSchema.safeParse(overrides);
  if (result.success) return result.data;
  const [issue] = result.error.issues;
  const name = String(issue?.path[0] ?? '(root)');
  throw new DressageError({
    code: 'invalid_argument',
    message: `${name}: ${issue === undefined ? 'invalid' : describeIssue(issue)}`,
    details: { setting: name },
  });
}

function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === 'too_small' && typeof issue.minimum === 'number') {
    return `must be ${issue.inclusive ? '>=' : '>'} ${issue.minimum}`;
  }
  if (issue.code === 'invalid_value') return `expected one of ${issue.values.map(String).join(', ')}`;
  if (issue.code === 'invalid_type' && issue.expected === 'int') return 'expected an integer';
  return issue.message;
}

function placeholderOf(source: SettingSource): string {
  return source.placeholder === undefined ? '' : ` ${source.placeholder}`;
}

function defaultOf(name: FieldName, source: SettingSource): string {
  if (source.cliDefault !== undefined) return ` (default ${source.cliDefault})`;
  const parsed = fields[name].safeParse(undefined);
  if (!parsed.success || parsed.data === undefined || parsed.data === null) return '';
  if (Array.isArray(parsed.data)) return '';
  if (typeof parsed.data === 'boolean') return '';
  if (name === 'storeMemoryLimitBytes' || name === 'maxRequestBytes') {
    return ` (default ${Number(parsed.data) / 1024 ** 2})`;
  }
  return ` (default ${String(parsed.data)})`;
}

/** The `--help` text of `dressage-proxy`, generated from {@link proxyConfigSchema}. */
export const usage = (() => {
  const lines: [string, string][] = [];
  for (const [name, source] of settingSources) {
    const env = source.env === undefined ? '' : ` (env ${source.env})`;
    const text = `${source.help}${defaultOf(name, source)}${env}`;
    if (source.flag === undefined) lines.push([`$${source.env}`, source.help + defaultOf(name, source)]);
    else lines.push([`--${source.flag}${placeholderOf(source)}`, text]);
    if (name === 'apiKey') lines.push(['--api-key-file FILE', 'read the bearer key from a file']);
  }
  const width = Math.max(...lines.map(([left]) => left.length)) + 2;
  const body = lines.map(([left, right]) => `  ${left.padEnd(width)}${right}`).join('\n');
  return `Usage: dressage-proxy --tokenizer-path DIR [options]\n       dressage-proxy repair-store --store-dir DIR   moves a damaged log's bad lines to a quarantine file\n\nPrecedence: a flag beats its environment variable, which beats the default.\n\n${body}\n`;
})();

function invalid(where: string, message: string): DressageError {
  return new DressageError({
    code: 'invalid_argument',
    message: `${where}: ${message}`,
    details: where.startsWith('--') ? { flag: where.slice(2) } : { variable: where },
  });
}

function numberOf(where: string, text: string): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value)) {
    throw invalid(where, `expected a number, got ${JSON.stringify(text)}`);
  }
  return value;
}

// The value a setting's text stands for, before the schema checks its range.
function settingValue(
  source: SettingSource,
  where: string,
  raw: string | boolean | (string | boolean)[],
): unknown {
  const text = typeof raw === 'string' ? raw : '';
  switch (source.kind) {
    case 'switch':
      return raw === true || /^(1|true|yes|on)$/i.test(text);
    case 'negated-switch':
      return !(raw === true || /^(1|true|yes|on)$/i.test(text));
    case 'list':
      return (Array.isArray(raw) ? raw.map(String) : [text])
        .flatMap((entry) => entry.split(/[\s,]+/))
        .filter(Boolean);
    case 'number':
      return numberOf(where, text);
    case 'mebibytes': {
      const megabytes = numberOf(where, text);
      if (megabytes <= 0) throw invalid(where, 'must be > 0');
      return Math.floor(megabytes * 1024 ** 2);
    }
    case 'seconds-or-unlimited': {
      const seconds = numberOf(where, text);
      return seconds === 0 ? null : seconds;
    }
    case 'path-or-none':
      return text === 'none' ? null : text;
    case 'text':
      return text;
  }
}

// `proxy-20260103T120000Z-1234`: sorts by start time, and two proxies started in the same second
// differ by pid.
function defaultRunId(): string {
  const stamp = new Date()
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  return `proxy-${stamp}-${process.pid}`;
}

/** The result of parsing the command line: a configuration, or a request for help. */
export type ParsedArguments = { help: true } | { help: false; config: ProxyConfig };

/**
 * Parses `dressage-proxy` arguments (§1.11 of the reference) and the environment variables of
 * {@link proxyConfigSchema}: a flag beats its variable, which beats the default. Beyond the library
 * defaults, the CLI derives the router address ({@link defaultRouterUrl}) and keeps the trajectory
 * log in `./.dressage/proxy-store/<run id>`, with a new run id per start unless `--run-id` names one.
 *
 * @throws DressageError `invalid_argument` naming the bad flag or variable.
 */
export function parseProxyArguments(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): ParsedArguments {
  let values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  try {
    values = parseArgs({
      args: [...argv],
      options: flagOptions,
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (error) {
    throw new DressageError({ code: 'invalid_argument', message: (error as Error).message, cause: error });
  }
  if (values.help === true) return { help: true };
  if (
    values['enable-transfer-queue'] === true ||
    /^(1|true|yes)$/i.test(env.DRESSAGE_ENABLE_TRANSFER_QUEUE ?? '')
  ) {
    throw invalid('--enable-transfer-queue', 'the TransferQueue data plane is not supported by this proxy');
  }
  // Setting values as given, checked by the schema below.
  const input: { [Name in FieldName]?: unknown } = {};
  const whereOf = new Map<string, string>();
  for (const [name, source] of settingSources) {
    const fromFlag = source.flag === undefined ? undefined : values[source.flag];
    const fromEnv = source.env === undefined ? undefined : env[source.env];
    if (fromFlag !== undefined) {
      const where = `--${source.flag}`;
      whereOf.set(name, where);
      input[name] = settingValue(source, where, fromFlag);
    } else if (fromEnv !== undefined && fromEnv.trim() !== '' && name !== 'apiKey') {
      const where = source.env as string;
      whereOf.set(name, where);
      input[name] = settingValue(source, where, fromEnv.trim());
    }
  }
  if (input.tokenizerPath === undefined || input.tokenizerPath === '')
    throw invalid('--tokenizer-path', 'is required');
  // The key may come from a file too; the secret reader applies the same precedence.
  const apiKey = readSecret({
    value: typeof values['api-key'] === 'string' ? values['api-key'] : undefined,
    file: typeof values['api-key-file'] === 'string' ? values['api-key-file'] : undefined,
    environment: env.DRESSAGE_PROXY_API_KEY,
    label: values['api-key'] === undefined ? '--api-key-file' : '--api-key',
  });
  if (apiKey === undefined) delete input.apiKey;
  else input.apiKey = apiKey;
  input.sglangRouterUrl ??= defaultRouterUrl(env);
  // The default store is the run's own: a proxy started again in the same folder gets a new, empty
  // one unless it names the run it continues (--run-id) or the store (--store-dir).
  if (!('storeDirectory' in input)) {
    input.runId ??= defaultRunId();
    input.storeDirectory = join(process.cwd(), '.dressage', 'proxy-store', String(input.runId));
  }
  const result = proxyConfigSchema.safeParse(input);
  if (!result.success) {
    const [issue] = result.error.issues;
    const name = String(issue?.path[0] ?? '');
    throw invalid(whereOf.get(name) ?? name, issue === undefined ? 'invalid' : describeIssue(issue));
  }
  return { help: false, config: result.data };
}
