import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { z } from 'zod';
import {
  type AdapterContext,
  type AdapterTurn,
  type AdapterTurnResult,
  AgentTurnError,
  type BlackboxAdapter,
  defaultCapabilities,
  parseAdapterOptions,
} from '../blackbox/adapter.js';
import { type AcpSessionUpdate, acpSessionUpdateSchema, acpUpdatesToChat } from './acp-updates.js';
import { agentEnv } from './agent-process.js';
import { JsonRpcAgentProcess } from './json-rpc-process.js';

/**
 * `backend_options` of the qwen-code adapter (strict). The executable is the server operator's
 * choice (`$DRESSAGE_QWEN_CODE_BIN`, else `qwen` on PATH), never a register request's: whoever reaches
 * the server must not pick a program for it to run.
 */
export const qwenCodeOptionsSchema = z.strictObject({
  model_id: z.string().min(1).default('proxy-model'),
  /** Agent steps per turn inside qwen-code. */
  max_session_turns: z.int().positive().default(50),
});

// The params of ACP's `session/update` notification; one that does not parse is not a step to record.
const sessionUpdateParamsSchema = z.looseObject({ sessionId: z.string(), update: acpSessionUpdateSchema });

/**
 * Drives Qwen Code (npm `@qwen-code/qwen-code`) as a long-lived `qwen --acp` process (the Agent
 * Client Protocol over its stdin and stdout): one ACP session per sample, one `session/prompt` per
 * turn. It speaks chat completions to the LLM proxy. Between samples the process is kept: a new
 * session is created for the next sample (qwen-code loads each session's settings and memory
 * anew) and the agent's home is emptied.
 */
export class QwenCodeAdapter implements BlackboxAdapter {
  readonly type = 'qwen_code';
  readonly capabilities = defaultCapabilities;
  readonly #options: z.output<typeof qwenCodeOptionsSchema>;
  readonly #process = new JsonRpcAgentProcess();
  #context: AdapterContext | null = null;
  #sessionId: string | null = null;

  constructor(options: unknown) {
    this.#options = parseAdapterOptions(qwenCodeOptionsSchema, options, 'qwen_code');
  }

  get #command(): string {
    return process.env.DRESSAGE_QWEN_CODE_BIN || 'qwen';
  }

  #home(context: AdapterContext): string {
    return join(context.runtimeDir, 'home');
  }

  async #writeSettings(context: AdapterContext): Promise<void> {
    const settingsDir = join(this.#home(context), '.qwen');
    await mkdir(settingsDir, { recursive: true });
    // The managed memory feature makes a second model request per run, and follow-up suggestions
    // one after every prompt; telemetry would dial out.
    const settings = {
      memory: { enableManagedAutoMemory: false },
      ui: { enableFollowupSuggestions: false },
      telemetry: { enabled: false },
      privacy: { usageStatisticsEnabled: false },
      general: { disableAutoUpdate: true, disableUpdateNag: true },
      security: { auth: { selectedType: 'openai' } },
      model: { name: this.#options.model_id },
    };
    await writeFile(join(settingsDir, 'settings.json'), JSON.stringify(settings, null, 2));
  }

  async init(context: AdapterContext): Promise<void> {
    this.#context = context;
    await this.#writeSettings(context);
    this.#process.start(
      [
        this.#command,
        '--acp',
        // The tools that only ACP mode offers (asking the user, plan mode): the same tool set as a
        // headless run.
        ...['ask_user_question', 'enter_plan_mode', 'exit_plan_mode'].flatMap((tool) => [
          '--exclude-tools',
          tool,
        ]),
        '--yolo',
        '--auth-type',
        'openai',
        '--max-session-turns',
        String(this.#options.max_session_turns),
        '--model',
        this.#options.model_id,
        ...(context.systemPrompt !== null ? ['--append-system-prompt', context.systemPrompt] : []),
      ],
      {
        cwd: context.workDir,
        env: agentEnv(this.#home(context), {
          OPENAI_BASE_URL: `${context.proxyOrigin}${context.apiPath}`,
          OPENAI_API_KEY: context.proxyApiKey,
          OPENAI_MODEL: this.#options.model_id,
        }),
      },
    );
    try {
      await this.#process.request(
        'initialize',
        { protocolVersion: 1, clientCapabilities: { fs: { readTextFile: false, writeTextFile: false } } },
        z.looseObject({ protocolVersion: z.number() }),
        AbortSignal.timeout(120_000),
      );
    } catch (error) {
      await this.#process.stop();
      throw new DressageError({
        code: 'unavailable',
        message: `qwen_code cannot run: ${error instanceof Error ? error.message : String(error)} ${this.#process.tail}`,
      });
    }
  }

  async health(): Promise<boolean> {
    return this.#context !== null && (await this.#process.ping());
  }

  async runTurn(turn: AdapterTurn): Promise<AdapterTurnResult> {
    const context = this.#context as AdapterContext;
    if (this.#sessionId === null) {
      const created = await this.#process.request(
        'session/new',
        { cwd: context.workDir, mcpServers: [] },
        z.looseObject({ sessionId: z.string().min(1) }),
        turn.signal,
      );
      this.#sessionId = created.sessionId;
    }
    const sessionId = this.#sessionId;
    const updates: AcpSessionUpdate[] = [];
    const stopListening = this.#process.onNotification((method, params) => {
      if (method !== 'session/update') return;
      const parsed = sessionUpdateParamsSchema.safeParse(params);
      if (parsed.success && parsed.data.sessionId === sessionId) updates.push(parsed.data.update);
    });
    const cancel = () => this.#process.notify('session/cancel', { sessionId });
    turn.signal.addEventListener('abort', cancel, { once: true });
    let stopReason: string;
    try {
      const result = await this.#process.request(
        'session/prompt',
        { sessionId, prompt: [{ type: 'text', text: turn.text }] },
        z.looseObject({ stopReason: z.string() }),
      );
      stopReason = result.stopReason;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (/context|too many tokens|maximum.*length/i.test(message))
        throw new AgentTurnError('context_overflow', `qwen_code: ${message}`);
      throw new AgentTurnError('backend_error', `qwen_code: ${message}`);
    } finally {
      turn.signal.removeEventListener('abort', cancel);
      stopListening();
    }
    if (turn.signal.aborted || stopReason === 'cancelled')
      throw new DressageError({ code: 'cancelled', message: 'qwen_code run was aborted' });
    await context.drainModelRequests();
    if (stopReason === 'max_turn_requests')
      throw new AgentTurnError('max_steps_exceeded', 'qwen_code: max_session_turns reached');
    return { outputs: acpUpdatesToChat(updates), backendSessionId: sessionId };
  }

  async abort(): Promise<void> {
    if (this.#sessionId !== null) this.#process.notify('session/cancel', { sessionId: this.#sessionId });
  }

  /**
   * Drops the sample just served: its ACP session is cancelled and left (the next sample gets a new
   * one, with its settings and memory loaded anew), and the agent's home is emptied (chat
   * recordings, memory files, anything the agent wrote) and its settings written again.
   */
  async recycle(): Promise<void> {
    if (!this.#process.running)
      throw new DressageError({
        code: 'unavailable',
        message: `qwen_code is not running: ${this.#process.tail}`,
      });
    await this.abort();
    this.#sessionId = null;
    const context = this.#context as AdapterContext;
    await rm(this.#home(context), { recursive: true, force: true });
    await this.#writeSettings(context);
  }

  async rebind(context: AdapterContext): Promise<void> {
    this.#context = context;
    this.#sessionId = null;
  }

  processGroups(): number[] {
    const pid = this.#process.pid;
    return pid !== null && this.#process.running ? [pid] : [];
  }

  async close(): Promise<void> {
    await this.#process.stop();
  }
}
