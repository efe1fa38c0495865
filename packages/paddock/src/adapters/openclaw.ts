import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import {
  type AdapterContext,
  type AdapterTurn,
  type AdapterTurnResult,
  AgentTurnError,
  parseAdapterOptions,
} from '../blackbox/adapter.js';
import { agentEnv } from './agent-process.js';
import { PerTurnCliAdapter } from './per-turn-cli.js';

/**
 * `backend_options` of the openclaw adapter (strict). The executable is the server operator's
 * choice (`$DRESSAGE_OPENCLAW_BIN`, else `openclaw` on PATH, run by the first `node` on PATH, which
 * must be Node >= 24), never a register request's.
 */
export const openclawOptionsSchema = z.strictObject({
  provider_id: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/)
    .default('sglang'),
  model_id: z.string().min(1).default('proxy-model'),
  model_name: z.string().min(1).optional(),
  context_window: z.int().positive().default(32768),
  max_tokens: z.int().positive().default(8192),
  /** Seconds one `openclaw agent` run may take. */
  timeout_seconds: z.int().positive().default(600),
});

/** Asks the agent not to wait for a human: a rollout has nobody to answer. */
const noQuestionsPolicy = `## Blackbox rollout interaction policy

Do not ask the user questions during this rollout.
Do not request confirmation or wait for external input.
If required information is missing, choose reasonable defaults and continue.
`;

/**
 * OpenClaw's `openclaw.json`: the LLM proxy as its one model provider (chat completions), the work
 * dir as the agent's workspace without bootstrap files, bundled channels and update checks off.
 * Inside a sandbox host exec runs in `full` mode (no prompts); elsewhere it is denied.
 */
export function openclawConfig(
  options: z.output<typeof openclawOptionsSchema>,
  context: Pick<AdapterContext, 'proxyOrigin' | 'apiPath' | 'proxyApiKey' | 'workDir' | 'insideSandbox'>,
) {
  const reference = `${options.provider_id}/${options.model_id}`;
  const name = options.model_name ?? options.model_id;
  return {
    update: { checkOnStart: false, auto: { enabled: false } },
    agents: {
      defaults: {
        workspace: context.workDir,
        skipBootstrap: true,
        model: { primary: reference },
        models: { [reference]: { alias: name } },
      },
    },
    tools: { exec: { mode: context.insideSandbox === true ? 'full' : 'deny' } },
    models: {
      mode: 'merge',
      providers: {
        [options.provider_id]: {
          baseUrl: `${context.proxyOrigin}${context.apiPath}`,
          apiKey: context.proxyApiKey,
          api: 'openai-completions',
          models: [
            {
              id: options.model_id,
              name,
              reasoning: true,
              compat: { thinkingFormat: 'deepseek', supportsReasoningEffort: false },
              input: ['text'],
              cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
              contextWindow: options.context_window,
              maxTokens: options.max_tokens,
            },
          ],
        },
      },
    },
  };
}

/** The `openclaw.json` the adapter writes. */
export type OpenclawConfig = ReturnType<typeof openclawConfig>;

const payloadsSchema = z.array(z.looseObject({ text: z.string().optional().catch(undefined) })).catch([]);

// The JSON envelope `openclaw agent --json` prints last: the final reply or its payloads, and how
// the run ended.
const envelopeSchema = z.looseObject({
  final: z.string().optional().catch(undefined),
  payloads: payloadsSchema.optional(),
  result: z.looseObject({ payloads: payloadsSchema.optional() }).optional().catch(undefined),
  ok: z.boolean().optional().catch(undefined),
  status: z.string().optional().catch(undefined),
  error: z
    .union([z.string(), z.looseObject({ message: z.string().optional().catch(undefined) })])
    .optional()
    .catch(() => ({ message: undefined })),
});

/** The final reply and failure of an `openclaw agent --json` run. */
export function openclawResult(stdout: string): { text: string | null; error: string | null } {
  const start = stdout.indexOf('{');
  if (start === -1) return { text: null, error: null };
  let value: unknown;
  try {
    value = JSON.parse(stdout.slice(start));
  } catch {
    return { text: null, error: null };
  }
  const parsed = envelopeSchema.safeParse(value);
  if (!parsed.success) return { text: null, error: null };
  const envelope = parsed.data;
  const payloads = envelope.payloads ?? envelope.result?.payloads ?? [];
  const text =
    envelope.final ?? (payloads.length > 0 ? payloads.map((payload) => payload.text ?? '').join('\n') : null);
  const failure = envelope.error;
  const error =
    envelope.ok === false || envelope.status === 'error' || failure !== undefined
      ? typeof failure === 'string'
        ? failure
        : (failure?.message ?? envelope.status ?? 'openclaw failed')
      : null;
  return { text, error };
}

/** Maps an OpenClaw failure message onto the turn error table. */
export function openclawFailure(message: string): AgentTurnError {
  if (/max_steps_exceeded|turn exceeded max_steps/i.test(message))
    return new AgentTurnError('max_steps_exceeded', `OpenClaw: ${message}`);
  if (/context_overflow|context window|context length|too many tokens/i.test(message))
    return new AgentTurnError('context_overflow', `OpenClaw: ${message}`);
  if (/timed? ?out/i.test(message)) return new AgentTurnError('backend_timeout', `OpenClaw: ${message}`);
  return new AgentTurnError('backend_error', `OpenClaw: ${message}`);
}

/**
 * Drives OpenClaw (npm `openclaw`, Node >= 24) headless: one embedded `openclaw agent --local
 * --session-id <id> --json` run per turn on a fixed session id, its state under the runtime dir's
 * HOME. It speaks chat completions to the LLM proxy.
 */
export class OpenclawAdapter extends PerTurnCliAdapter {
  readonly type = 'openclaw';
  readonly #options: z.output<typeof openclawOptionsSchema>;
  readonly #sessionId = randomUUID();

  constructor(options: unknown) {
    super();
    this.#options = parseAdapterOptions(openclawOptionsSchema, options, 'openclaw');
  }

  protected get command(): string {
    return process.env.DRESSAGE_OPENCLAW_BIN || 'openclaw';
  }

  #environment(context: AdapterContext): NodeJS.ProcessEnv {
    return agentEnv(this.home, {
      OPENCLAW_NO_AUTO_UPDATE: '1',
      OPENCLAW_TELEMETRY: '0',
      OPENCLAW_DISABLE_BONJOUR: '1',
      OPENCLAW_SKIP_CHANNELS: '1',
      OPENCLAW_SKIP_CRON: '1',
      OPENCLAW_SKIP_GMAIL_WATCHER: '1',
      OPENCLAW_SKIP_BROWSER_CONTROL_SERVER: '1',
      OPENCLAW_SKIP_CANVAS_HOST: '1',
      OPENCLAW_SKIP_STARTUP_MODEL_PREWARM: '1',
      OPENCLAW_NO_RESPAWN: '1',
      SGLANG_API_KEY: context.proxyApiKey,
    });
  }

  protected async configure(context: AdapterContext): Promise<void> {
    this.home = join(context.runtimeDir, 'home');
    const stateDir = join(this.home, '.openclaw');
    await mkdir(stateDir, { recursive: true });
    await writeFile(
      join(stateDir, 'openclaw.json'),
      JSON.stringify(openclawConfig(this.#options, context), null, 2),
    );
    // The agent's instructions: the registered system prompt, then the no-questions policy.
    const instructions =
      context.systemPrompt === null
        ? noQuestionsPolicy
        : `${context.systemPrompt.trimEnd()}\n\n${noQuestionsPolicy}`;
    await writeFile(join(stateDir, 'AGENTS.md'), instructions);
  }

  protected override versionEnvironment(): NodeJS.ProcessEnv {
    return this.#environment(this.context as AdapterContext);
  }

  async runTurn(turn: AdapterTurn): Promise<AdapterTurnResult> {
    const context = this.context as AdapterContext;
    const args = [
      this.command,
      'agent',
      '--local',
      '--session-id',
      this.#sessionId,
      '--message',
      turn.text,
      '--json',
      '--timeout',
      String(this.#options.timeout_seconds),
    ];
    const result = await this.runCli(turn, args, this.#environment(context));
    const { text, error } = openclawResult(result.stdout);
    if (error !== null) throw openclawFailure(error);
    if (text === null) throw this.exitError(result);
    return { outputs: [{ role: 'assistant', content: text }], backendSessionId: this.#sessionId };
  }
}
