import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import {
  type AdapterContext,
  type AdapterTurn,
  type AdapterTurnResult,
  parseAdapterOptions,
} from '../blackbox/adapter.js';
import type { BlackboxMessage } from '../blackbox/schemas.js';
import { agentEnv } from './agent-process.js';
import { PerTurnCliAdapter } from './per-turn-cli.js';

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

type Json = Record<string, unknown>;

/**
 * Converts qwen-code `--output-format stream-json` lines into chat messages. Assistant events carry
 * text and tool_use blocks; user events carry tool_result blocks.
 */
export function qwenStreamToChat(stdout: string): { outputs: BlackboxMessage[]; result: string | null } {
  const outputs: BlackboxMessage[] = [];
  let result: string | null = null;
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    let event: Json;
    try {
      event = JSON.parse(line) as Json;
    } catch {
      continue;
    }
    const message = (event.message ?? {}) as Json;
    const blocks = Array.isArray(message.content) ? (message.content as Json[]) : [];
    if (event.type === 'assistant') {
      const text = blocks
        .filter((block) => block.type === 'text')
        .map((block) => String(block.text ?? ''))
        .join('');
      const thinking = blocks
        .filter((block) => block.type === 'thinking')
        .map((block) => String(block.thinking ?? ''))
        .join('');
      const calls = blocks.filter((block) => block.type === 'tool_use');
      if (text === '' && thinking === '' && calls.length === 0) continue;
      const assistant: BlackboxMessage = { role: 'assistant', content: text };
      if (thinking !== '') assistant.reasoning_content = thinking;
      if (calls.length > 0) {
        assistant.tool_calls = calls.map((block) => ({
          id: String(block.id ?? ''),
          type: 'function',
          function: { name: String(block.name ?? ''), arguments: JSON.stringify(block.input ?? {}) },
        }));
      }
      outputs.push(assistant);
    } else if (event.type === 'user') {
      for (const block of blocks.filter((item) => item.type === 'tool_result')) {
        const content = block.content;
        outputs.push({
          role: 'tool',
          tool_call_id: String(block.tool_use_id ?? ''),
          content: typeof content === 'string' ? content : JSON.stringify(content ?? ''),
        });
      }
    } else if (event.type === 'result' && typeof event.result === 'string') {
      result = event.result;
    }
  }
  return { outputs, result };
}

/**
 * Drives Qwen Code (npm `@qwen-code/qwen-code`) headless: one `qwen` run per turn, the first with a
 * fixed `--session-id`, later ones resuming it. It speaks chat completions to the LLM proxy.
 */
export class QwenCodeAdapter extends PerTurnCliAdapter {
  readonly type = 'qwen_code';
  readonly #options: z.output<typeof qwenCodeOptionsSchema>;
  readonly #sessionId = randomUUID();
  #turns = 0;

  constructor(options: unknown) {
    super();
    this.#options = parseAdapterOptions(qwenCodeOptionsSchema, options, 'qwen_code');
  }

  protected get command(): string {
    return process.env.DRESSAGE_QWEN_CODE_BIN || 'qwen';
  }

  protected async configure(context: AdapterContext): Promise<void> {
    this.home = join(context.runtimeDir, 'home');
    const settingsDir = join(this.home, '.qwen');
    await mkdir(settingsDir, { recursive: true });
    // The managed memory feature makes a second model request per run; telemetry would dial out.
    const settings = {
      memory: { enableManagedAutoMemory: false },
      telemetry: { enabled: false },
      privacy: { usageStatisticsEnabled: false },
      general: { disableAutoUpdate: true, disableUpdateNag: true },
      security: { auth: { selectedType: 'openai' } },
      model: { name: this.#options.model_id },
    };
    await writeFile(join(settingsDir, 'settings.json'), JSON.stringify(settings, null, 2));
  }

  async runTurn(turn: AdapterTurn): Promise<AdapterTurnResult> {
    const context = this.context as AdapterContext;
    const args = [
      this.command,
      turn.text,
      '--yolo',
      '--auth-type',
      'openai',
      '--output-format',
      'stream-json',
      '--max-session-turns',
      String(this.#options.max_session_turns),
      '--model',
      this.#options.model_id,
      ...(this.#turns === 0 ? ['--session-id', this.#sessionId] : ['--resume', this.#sessionId]),
      ...(context.systemPrompt !== null ? ['--append-system-prompt', context.systemPrompt] : []),
    ];
    const env = agentEnv(this.home, {
      OPENAI_BASE_URL: `${context.proxyOrigin}${context.apiPath}`,
      OPENAI_API_KEY: context.proxyApiKey,
      OPENAI_MODEL: this.#options.model_id,
    });
    const result = await this.runCli(turn, args, env).finally(() => {
      this.#turns += 1;
    });
    const { outputs, result: final } = qwenStreamToChat(result.stdout);
    if (result.returncode !== 0 && outputs.length === 0) throw this.exitError(result);
    if (outputs.length === 0 && final !== null) outputs.push({ role: 'assistant', content: final });
    return { outputs, backendSessionId: this.#sessionId };
  }
}
