import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { sleep } from '@dressage/protocol/internal';
import { z } from 'zod';
import {
  type AdapterContext,
  type AdapterTurn,
  type AdapterTurnResult,
  type BlackboxAdapter,
  defaultCapabilities,
  parseAdapterOptions,
} from '../blackbox/adapter.js';
import type { BlackboxMessage } from '../blackbox/schemas.js';
import { AgentProcess, agentEnv, freePort } from './agent-process.js';

/**
 * `backend_options` of the opencode adapter (strict). The executable is the server operator's
 * choice (`$DRESSAGE_OPENCODE_BIN`, else `opencode` on PATH), never a register request's: whoever reaches
 * the server must not pick a program for it to run.
 */
export const opencodeOptionsSchema = z.strictObject({
  provider_id: z.string().min(1).default('sglang'),
  provider_name: z.string().min(1).default('Dressage Proxy'),
  provider_package: z.string().min(1).default('@ai-sdk/openai-compatible'),
  model_id: z.string().min(1).default('proxy-model'),
  model_name: z.string().min(1).default('Dressage Proxy'),
  model_limit: z
    .strictObject({
      context: z.int().positive(),
      output: z.int().positive(),
      input: z.int().positive().optional(),
    })
    .optional(),
  /**
   * opencode permissions merged over the adapter's (`{"*": "allow", "question": "deny", "doom_loop":
   * "deny"}`). A tool set to `deny` is left out of the model's tool list: `{"*": "deny", "bash":
   * "allow"}` offers the bash tool alone (about 1,300 prompt tokens instead of about 5,000 for all ten).
   */
  permission: z.record(z.string().min(1), z.enum(['allow', 'ask', 'deny'])).optional(),
  compaction: z
    .strictObject({
      auto: z.boolean().optional(),
      prune: z.boolean().optional(),
      tail_turns: z.int().nonnegative().optional(),
      preserve_recent_tokens: z.int().nonnegative().optional(),
      reserved: z.int().nonnegative().optional(),
    })
    .optional(),
});

/** Options of the opencode adapter. */
export type OpencodeOptions = z.output<typeof opencodeOptionsSchema>;

type Json = Record<string, unknown>;

/** Converts opencode session messages (info + parts) to chat messages: replies, tool calls, tool results. */
export function opencodeMessagesToChat(messages: readonly Json[]): BlackboxMessage[] {
  const out: BlackboxMessage[] = [];
  for (const message of messages) {
    const info = (message.info ?? {}) as Json;
    if (info.role !== 'assistant') continue;
    const parts = Array.isArray(message.parts) ? (message.parts as Json[]) : [];
    const text = parts
      .filter((part) => part.type === 'text')
      .map((part) => String(part.text ?? ''))
      .join('');
    const reasoning = parts
      .filter((part) => part.type === 'reasoning')
      .map((part) => String(part.text ?? ''))
      .join('');
    const tools = parts.filter((part) => part.type === 'tool');
    const assistant: BlackboxMessage = { role: 'assistant', content: text };
    if (reasoning !== '') assistant.reasoning_content = reasoning;
    if (tools.length > 0) {
      assistant.tool_calls = tools.map((part) => ({
        id: String(part.callID ?? part.id ?? ''),
        type: 'function',
        function: {
          name: String(part.tool ?? ''),
          arguments: JSON.stringify(((part.state ?? {}) as Json).input ?? {}),
        },
      }));
    }
    if (text === '' && reasoning === '' && tools.length === 0) continue;
    out.push(assistant);
    for (const part of tools) {
      const state = (part.state ?? {}) as Json;
      const output = state.output ?? state.error ?? '';
      out.push({
        role: 'tool',
        tool_call_id: String(part.callID ?? part.id ?? ''),
        name: String(part.tool ?? ''),
        content: typeof output === 'string' ? output : JSON.stringify(output),
      });
    }
  }
  return out;
}

/**
 * Drives opencode (npm `opencode-ai`) in server mode: `opencode serve` on a private port, one
 * opencode session per bound session, one `POST /session/{id}/message` per turn. Its model is a
 * custom OpenAI-compatible provider whose base URL is the LLM proxy.
 */
export class OpencodeAdapter implements BlackboxAdapter {
  readonly type = 'opencode';
  readonly capabilities = defaultCapabilities;
  readonly #options: OpencodeOptions;
  readonly #process = new AgentProcess();
  #context: AdapterContext | null = null;
  #port = 0;
  #sessionId: string | null = null;
  #seen = 0;

  constructor(options: unknown) {
    this.#options = parseAdapterOptions(opencodeOptionsSchema, options, 'opencode');
  }

  get #base(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** The opencode.json written for the agent. */
  configFor(context: AdapterContext): Json {
    const o = this.#options;
    const model: Json = { name: o.model_name, tools: true };
    if (o.model_limit) model.limit = o.model_limit;
    const config: Json = {
      $schema: 'https://opencode.ai/config.json',
      provider: {
        [o.provider_id]: {
          npm: o.provider_package,
          name: o.provider_name,
          options: {
            baseURL: `${context.proxyOrigin}${context.apiPath}`,
            apiKey: context.proxyApiKey,
            timeout: context.routerTimeoutMs,
          },
          models: { [o.model_id]: model },
        },
      },
      model: `${o.provider_id}/${o.model_id}`,
      small_model: `${o.provider_id}/${o.model_id}`,
      permission: { '*': 'allow', question: 'deny', doom_loop: 'deny', ...o.permission },
      share: 'disabled',
      autoupdate: false,
      agent: { title: { disable: true } },
    };
    if (o.compaction) config.compaction = o.compaction;
    return config;
  }

  async init(context: AdapterContext): Promise<void> {
    this.#context = context;
    const home = join(context.runtimeDir, 'home');
    const configDir = join(home, '.config', 'opencode');
    await mkdir(join(configDir, 'prompts'), { recursive: true });
    const config = this.configFor(context);
    if (context.systemPrompt !== null) {
      await writeFile(join(configDir, 'prompts', 'build.txt'), context.systemPrompt);
      config.agent = { ...(config.agent as Json), build: { prompt: '{file:./prompts/build.txt}' } };
    }
    await writeFile(join(configDir, 'opencode.json'), JSON.stringify(config, null, 2));
    this.#port = await freePort();
    const command = process.env.DRESSAGE_OPENCODE_BIN || 'opencode';
    this.#process.start([command, 'serve', '--port', String(this.#port), '--hostname', '127.0.0.1'], {
      cwd: context.workDir,
      env: agentEnv(home, {
        OPENCODE_DISABLE_MODELS_FETCH: '1',
        OPENCODE_DISABLE_AUTOUPDATE: '1',
        OPENCODE_DISABLE_LSP_DOWNLOAD: '1',
      }),
    });
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      if (!this.#process.running)
        throw new DressageError({
          code: 'unavailable',
          message: `opencode exited during startup: ${this.#process.tail}`,
        });
      if (await this.health()) return;
      await sleep(200);
    }
    throw new DressageError({
      code: 'deadline_exceeded',
      message: `opencode did not become healthy: ${this.#process.tail}`,
    });
  }

  async health(): Promise<boolean> {
    if (!this.#process.running) return false;
    try {
      const response = await fetch(`${this.#base}/global/health`, { signal: AbortSignal.timeout(3000) });
      const body = (await response.json()) as Json;
      return response.ok && body.healthy === true;
    } catch {
      return false;
    }
  }

  async #call(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<unknown> {
    const response = await fetch(`${this.#base}${path}`, {
      method,
      headers: body === undefined ? undefined : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
    const text = await response.text();
    if (!response.ok)
      throw new DressageError({
        code: 'unavailable',
        message: `opencode ${method} ${path} answered ${response.status}: ${text.slice(0, 500)}`,
        details: { status: response.status },
      });
    return text === '' ? null : JSON.parse(text);
  }

  async runTurn(turn: AdapterTurn): Promise<AdapterTurnResult> {
    const context = this.#context as AdapterContext;
    if (this.#sessionId === null) {
      const created = (await this.#call('POST', '/session', {}, turn.signal)) as Json;
      this.#sessionId = String(created.id);
    }
    const o = this.#options;
    await this.#call(
      'POST',
      `/session/${this.#sessionId}/message`,
      {
        parts: [{ type: 'text', text: turn.text }],
        agent: 'build',
        model: { providerID: o.provider_id, modelID: o.model_id },
      },
      turn.signal,
    );
    // The reply can be returned before the last streamed model request has closed.
    await context.drainModelRequests();
    const all = (await this.#call(
      'GET',
      `/session/${this.#sessionId}/message`,
      undefined,
      turn.signal,
    )) as Json[];
    const fresh = all.slice(this.#seen);
    this.#seen = all.length;
    return { outputs: opencodeMessagesToChat(fresh), backendSessionId: this.#sessionId };
  }

  async abort(): Promise<void> {
    if (this.#sessionId === null || !this.#process.running) return;
    await this.#call('POST', `/session/${this.#sessionId}/abort`, {}, AbortSignal.timeout(5000)).catch(
      () => undefined,
    );
  }

  async close(): Promise<void> {
    await this.#process.stop();
  }
}
