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
import { type StreamJsonResult, streamJsonResult, streamJsonToChat } from './stream-json.js';

/**
 * `backend_options` of the claude_code adapter (strict). The executable is the server operator's
 * choice (`$DRESSAGE_CLAUDE_CODE_BIN`, else `claude` on PATH), never a register request's.
 */
export const claudeCodeOptionsSchema = z.strictObject({
  model_id: z.string().min(1).default('proxy-model'),
  /** Agent steps per turn inside Claude Code (`--max-turns`). */
  max_turns: z.int().positive().default(20),
  /** How a registered system prompt applies: appended to Claude Code's own, or replacing it. */
  system_prompt_mode: z.enum(['append', 'replace']).default('append'),
  /** Claude Code's automatic compaction of long histories (rewrites the trajectory when it fires). */
  auto_compact: z.boolean().default(false),
  /** Subagents (`Task`/`Agent` tools): each would be a trajectory of its own. */
  subagents: z.boolean().default(false),
});

/** Claude Code's `settings.json` as the adapter writes it. */
export interface ClaudeCodeSettings {
  autoCompactEnabled: boolean;
  permissions: { allow: string[]; deny: string[] };
}

/** Maps Claude Code's own failure report onto the turn error table; null when the run succeeded. */
export function claudeFailure(result: StreamJsonResult | null, maxTurns: number): AgentTurnError | null {
  if (result === null || (result.is_error !== true && result.subtype === 'success')) return null;
  const text = String(result.result ?? result.error ?? result.subtype ?? 'Claude Code failed');
  if (result.subtype === 'error_max_turns')
    return new AgentTurnError('max_steps_exceeded', `Claude Code reached --max-turns ${maxTurns}`, {
      max_turns: maxTurns,
      num_turns: result.num_turns ?? null,
    });
  if (/prompt is too long|context (window|length)|too many tokens/i.test(text))
    return new AgentTurnError('context_overflow', `Claude Code: ${text}`);
  if (result.is_error === true) return new AgentTurnError('backend_error', `Claude Code: ${text}`);
  return null;
}

/**
 * Drives Claude Code (npm `@anthropic-ai/claude-code`, a native binary) headless: one `claude -p`
 * run per turn, the first with a fixed `--session-id`, later ones resuming it. It speaks Anthropic
 * Messages, which the LLM proxy bridges onto chat completions. Its HOME and config directory are
 * the runtime dir's; telemetry, updates, error reports and prompt caching are off.
 */
export class ClaudeCodeAdapter extends PerTurnCliAdapter {
  readonly type = 'claude_code';
  readonly #options: z.output<typeof claudeCodeOptionsSchema>;
  #settingsPath = '';
  readonly #sessionId = randomUUID();
  #turns = 0;

  constructor(options: unknown) {
    super();
    this.#options = parseAdapterOptions(claudeCodeOptionsSchema, options, 'claude_code');
  }

  protected get command(): string {
    return process.env.DRESSAGE_CLAUDE_CODE_BIN || 'claude';
  }

  /** Claude Code's settings: tools allowed only inside a sandbox, subagents denied unless asked for. */
  settings(insideSandbox: boolean): ClaudeCodeSettings {
    const allow = insideSandbox
      ? ['Bash(*)', 'Read(*)', 'Edit(*)', 'Write(*)', 'Glob', 'Grep', 'LS', 'NotebookEdit', 'TodoWrite']
      : [];
    return {
      autoCompactEnabled: this.#options.auto_compact,
      permissions: {
        allow,
        deny: this.#options.subagents ? [] : ['Task', 'Agent'],
      },
    };
  }

  #environment(context: AdapterContext): NodeJS.ProcessEnv {
    const model = this.#options.model_id;
    // agentEnv passes nothing credential-like of the host (no ANTHROPIC_*, no CLAUDE_* tokens).
    return agentEnv(this.home, {
      CLAUDE_CONFIG_DIR: join(this.home, '.claude'),
      ANTHROPIC_BASE_URL: context.proxyOrigin,
      ANTHROPIC_AUTH_TOKEN: context.proxyApiKey,
      ANTHROPIC_MODEL: model,
      // Every model tier (and the small fast model of its side requests) is the policy.
      ANTHROPIC_SMALL_FAST_MODEL: model,
      ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
      ANTHROPIC_DEFAULT_SONNET_MODEL: model,
      ANTHROPIC_DEFAULT_OPUS_MODEL: model,
      ANTHROPIC_CUSTOM_MODEL_OPTION: model,
      DISABLE_PROMPT_CACHING: '1',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_ERROR_REPORTING: '1',
      DISABLE_AUTOUPDATER: '1',
      DISABLE_UPDATES: '1',
      DISABLE_BUG_COMMAND: '1',
      DISABLE_GROWTHBOOK: '1',
      DISABLE_INSTALLATION_CHECKS: '1',
      CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: '1',
      CLAUDE_CODE_DISABLE_TERMINAL_TITLE: '1',
      ...(this.#options.auto_compact ? {} : { DISABLE_AUTO_COMPACT: '1' }),
    });
  }

  protected async configure(context: AdapterContext): Promise<void> {
    this.home = join(context.runtimeDir, 'home');
    const configDir = join(this.home, '.claude');
    await mkdir(configDir, { recursive: true });
    this.#settingsPath = join(configDir, 'settings.json');
    await writeFile(
      this.#settingsPath,
      JSON.stringify(this.settings(context.insideSandbox === true), null, 2),
    );
  }

  async runTurn(turn: AdapterTurn): Promise<AdapterTurnResult> {
    const context = this.context as AdapterContext;
    const prompt = context.systemPrompt;
    const args = [
      this.command,
      '-p',
      turn.text,
      '--output-format',
      'stream-json',
      '--verbose',
      '--model',
      this.#options.model_id,
      '--max-turns',
      String(this.#options.max_turns),
      '--permission-mode',
      'default',
      '--settings',
      this.#settingsPath,
      '--setting-sources',
      'user',
      ...(this.#turns === 0 ? ['--session-id', this.#sessionId] : ['--resume', this.#sessionId]),
      ...(prompt === null
        ? []
        : [
            this.#options.system_prompt_mode === 'append' ? '--append-system-prompt' : '--system-prompt',
            prompt,
          ]),
    ];
    const result = await this.runCli(turn, args, this.#environment(context)).finally(() => {
      this.#turns += 1;
    });
    const failure = claudeFailure(streamJsonResult(result.stdout), this.#options.max_turns);
    if (failure !== null) throw failure;
    const { outputs, result: final } = streamJsonToChat(result.stdout);
    if (result.returncode !== 0 && outputs.length === 0) throw this.exitError(result);
    if (outputs.length === 0 && final !== null) outputs.push({ role: 'assistant', content: final });
    return { outputs, backendSessionId: this.#sessionId };
  }
}
