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
import { codexEventsToChat } from './codex-events.js';
import { PerTurnCliAdapter } from './per-turn-cli.js';

/**
 * `backend_options` of the codex adapter (strict). The executable is the server operator's choice
 * (`$DRESSAGE_CODEX_BIN`, else `codex` on PATH), never a register request's.
 */
export const codexOptionsSchema = z.strictObject({
  model_id: z.string().min(1).default('proxy-model'),
  model_name: z.string().min(1).default('Dressage Proxy'),
  model_provider_id: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/)
    .default('dressage_proxy'),
});

/** The variable through which Codex reads its provider key (the LLM proxy's agent key). */
const keyVariable = 'DRESSAGE_AGENT_API_KEY';

/** A TOML basic string. */
function tomlString(value: string): string {
  return JSON.stringify(value);
}

/**
 * Codex's `config.toml`: the LLM proxy as its only model provider (Responses wire API), web search,
 * update checks, analytics and feedback off. Inside a sandbox it runs commands without asking and
 * without a sandbox of its own (the bubblewrap slot is the sandbox); elsewhere it asks, and in
 * `codex exec` nobody answers, so nothing runs.
 */
export function codexConfig(
  options: z.output<typeof codexOptionsSchema>,
  context: Pick<AdapterContext, 'proxyOrigin' | 'apiPath' | 'systemPrompt' | 'insideSandbox'>,
): string {
  const inside = context.insideSandbox === true;
  const lines = [
    `model = ${tomlString(options.model_id)}`,
    `model_provider = ${tomlString(options.model_provider_id)}`,
    `approval_policy = ${tomlString(inside ? 'never' : 'untrusted')}`,
    `sandbox_mode = ${tomlString(inside ? 'danger-full-access' : 'read-only')}`,
    'web_search = "disabled"',
    'check_for_update_on_startup = false',
    'cli_auth_credentials_store = "file"',
  ];
  if (context.systemPrompt !== null)
    lines.push(`developer_instructions = ${tomlString(context.systemPrompt)}`);
  lines.push(
    '',
    '[analytics]',
    'enabled = false',
    '',
    '[feedback]',
    'enabled = false',
    '',
    '[history]',
    'persistence = "none"',
    '',
    `[model_providers.${options.model_provider_id}]`,
    `name = ${tomlString(options.model_name)}`,
    `base_url = ${tomlString(`${context.proxyOrigin}${context.apiPath}`)}`,
    'wire_api = "responses"',
    `env_key = ${tomlString(keyVariable)}`,
    // A retried request would be a second recorded step for one action.
    'request_max_retries = 0',
    'stream_max_retries = 0',
    '',
  );
  return lines.join('\n');
}

/** Maps a failed Codex turn's message onto the turn error table. */
export function codexFailure(message: string): AgentTurnError {
  if (/context window|context_length|too many tokens|context_overflow/i.test(message))
    return new AgentTurnError('context_overflow', `Codex: ${message}`);
  if (/max_steps_exceeded|max_steps/i.test(message))
    return new AgentTurnError('max_steps_exceeded', `Codex: ${message}`);
  return new AgentTurnError('backend_error', `Codex: ${message}`);
}

/**
 * Drives Codex (npm `@openai/codex`, a native binary in the package) headless: one
 * `codex exec --json` run per turn, later turns `codex exec resume <thread>`. It speaks the OpenAI
 * Responses API, which the LLM proxy bridges onto chat completions; `CODEX_HOME` is the runtime
 * dir's.
 */
export class CodexAdapter extends PerTurnCliAdapter {
  readonly type = 'codex';
  readonly #options: z.output<typeof codexOptionsSchema>;
  #threadId: string | null = null;

  constructor(options: unknown) {
    super();
    this.#options = parseAdapterOptions(codexOptionsSchema, options, 'codex');
  }

  protected get command(): string {
    return process.env.DRESSAGE_CODEX_BIN || 'codex';
  }

  #environment(context: AdapterContext): NodeJS.ProcessEnv {
    return agentEnv(this.home, {
      CODEX_HOME: join(this.home, '.codex'),
      CODEX_SQLITE_HOME: join(this.home, '.codex-sqlite'),
      [keyVariable]: context.proxyApiKey,
      RUST_LOG: 'error',
    });
  }

  protected async configure(context: AdapterContext): Promise<void> {
    this.home = join(context.runtimeDir, 'home');
    const codexHome = join(this.home, '.codex');
    await mkdir(codexHome, { recursive: true });
    await mkdir(join(this.home, '.codex-sqlite'), { recursive: true });
    await writeFile(join(codexHome, 'config.toml'), codexConfig(this.#options, context));
  }

  async runTurn(turn: AdapterTurn): Promise<AdapterTurnResult> {
    const context = this.context as AdapterContext;
    const args = [
      this.command,
      'exec',
      ...(this.#threadId === null ? [] : ['resume', this.#threadId]),
      '--json',
      '--model',
      this.#options.model_id,
      '--skip-git-repo-check',
      '--ignore-rules',
      turn.text,
    ];
    const result = await this.runCli(turn, args, this.#environment(context));
    const { outputs, threadId, error } = codexEventsToChat(result.stdout);
    this.#threadId ??= threadId;
    if (error !== null) throw codexFailure(error);
    if (result.returncode !== 0 || outputs.length === 0) throw this.exitError(result);
    return { outputs, backendSessionId: this.#threadId };
  }
}
