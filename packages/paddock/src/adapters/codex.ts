import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { sleep } from '@dressage/protocol/internal';
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
import { agentEnv, removeAllBut } from './agent-process.js';
import { type CodexItem, codexItemCompletedSchema, codexItemsToChat } from './codex-items.js';
import { JsonRpcAgentProcess } from './json-rpc-process.js';

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
 * without a sandbox of its own (the bubblewrap slot is the sandbox); elsewhere commands run only
 * in Codex's own read-only sandbox and any approval it asks for is refused (the JSON-RPC client
 * answers no request of the agent).
 */
export function codexConfig(
  options: z.output<typeof codexOptionsSchema>,
  context: Pick<AdapterContext, 'proxyOrigin' | 'apiPath' | 'systemPrompt' | 'insideSandbox'>,
): string {
  const inside = context.insideSandbox === true;
  const lines = [
    `model = ${tomlString(options.model_id)}`,
    `model_provider = ${tomlString(options.model_provider_id)}`,
    // Codex 0.171.0 refuses `untrusted` in config.toml ("no longer supported").
    `approval_policy = ${tomlString(inside ? 'never' : 'on-request')}`,
    `sandbox_mode = ${tomlString(inside ? 'danger-full-access' : 'read-only')}`,
    'web_search = "disabled"',
    'check_for_update_on_startup = false',
    'cli_auth_credentials_store = "file"',
    // An unsubscribed thread is unloaded at once (by default after a grace period): a kept server
    // holds no earlier sample's thread.
    'thread_unload_delay_secs = 0',
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

// Answers and notifications of `codex app-server` the adapter reads (the app-server protocol,
// `codex app-server generate-ts`, Codex 0.171.0: v2/ThreadStartResponse.ts, v2/TurnStartResponse.ts,
// v2/TurnCompletedNotification.ts, v2/ErrorNotification.ts, v2/ThreadLoadedListResponse.ts, v2/ThreadClosedNotification.ts).
const threadStartedSchema = z.looseObject({ thread: z.looseObject({ id: z.string().min(1) }) });
const turnSchema = z.looseObject({
  id: z.string().min(1),
  status: z.string(),
  error: z.looseObject({ message: z.string() }).nullish().catch(null),
});
const turnStartedSchema = z.looseObject({ turn: turnSchema });
const turnCompletedSchema = z.looseObject({ threadId: z.string(), turn: turnSchema });
const loadedThreadsSchema = z.looseObject({ data: z.array(z.string()) });
const threadClosedSchema = z.looseObject({ threadId: z.string() });
const errorNotificationSchema = z.looseObject({
  threadId: z.string(),
  willRetry: z.boolean().optional(),
  error: z.looseObject({ message: z.string() }),
});

/**
 * Settles 10 s after `signal` aborts as an interrupted turn: a turn Codex does not report ended
 * once interrupted must not hold the slot.
 */
function interrupted(signal: AbortSignal): Promise<TurnEnd> {
  return new Promise((resolve) => {
    const settle = () =>
      setTimeout(() => resolve({ status: 'interrupted', error: null, items: [] }), 10_000).unref();
    if (signal.aborted) settle();
    else signal.addEventListener('abort', settle, { once: true });
  });
}

/** What a turn ended with: its status and error, and the items it completed. */
interface TurnEnd {
  status: string;
  error: string | null;
  items: CodexItem[];
}

/**
 * Drives Codex (npm `@openai/codex`, a native binary in the package) as a long-lived `codex
 * app-server` (JSON-RPC over its stdin and stdout; `codex exec` is a client of the same server,
 * in process): one ephemeral thread per sample (`thread/start` with `ephemeral: true`: no rollout
 * or history written to disk), one `turn/start` per turn, `turn/interrupt` to stop one. It speaks
 * the OpenAI Responses API, which the LLM proxy bridges onto chat completions; `CODEX_HOME` is the
 * runtime dir's. Kept between samples: its thread is dropped and the agent's home emptied.
 */
export class CodexAdapter implements BlackboxAdapter {
  readonly type = 'codex';
  readonly capabilities = defaultCapabilities;
  readonly #options: z.output<typeof codexOptionsSchema>;
  readonly #process = new JsonRpcAgentProcess();
  #context: AdapterContext | null = null;
  #threadId: string | null = null;
  // The turn running now (its id once `turn/start` answered), for `turn/interrupt`.
  #turn: { id: string | null } | null = null;
  // What Codex put in its home by the end of start-up (its state databases, installation id):
  // kept on recycle.
  #baseline = new Set<string>();

  constructor(options: unknown) {
    this.#options = parseAdapterOptions(codexOptionsSchema, options, 'codex');
  }

  get #command(): string {
    return process.env.DRESSAGE_CODEX_BIN || 'codex';
  }

  #home(context: AdapterContext): string {
    return join(context.runtimeDir, 'home');
  }

  async #writeConfig(context: AdapterContext): Promise<void> {
    const codexHome = join(this.#home(context), '.codex');
    await mkdir(codexHome, { recursive: true });
    await mkdir(join(this.#home(context), '.codex-sqlite'), { recursive: true });
    await writeFile(join(codexHome, 'config.toml'), codexConfig(this.#options, context));
  }

  async init(context: AdapterContext): Promise<void> {
    this.#context = context;
    await this.#writeConfig(context);
    const home = this.#home(context);
    this.#process.start([this.#command, 'app-server'], {
      cwd: context.workDir,
      env: agentEnv(home, {
        CODEX_HOME: join(home, '.codex'),
        CODEX_SQLITE_HOME: join(home, '.codex-sqlite'),
        [keyVariable]: context.proxyApiKey,
        RUST_LOG: 'error',
      }),
    });
    try {
      await this.#process.request(
        'initialize',
        { clientInfo: { name: 'dressage', title: null, version: '1' }, capabilities: null },
        z.looseObject({}),
        AbortSignal.timeout(120_000),
      );
      this.#process.notify('initialized', {});
    } catch (error) {
      await this.#process.stop();
      throw new DressageError({
        code: 'unavailable',
        message: `codex cannot run: ${error instanceof Error ? error.message : String(error)} ${this.#process.tail}`,
      });
    }
    this.#baseline = new Set(await readdir(join(home, '.codex')));
  }

  async health(): Promise<boolean> {
    return this.#context !== null && (await this.#process.ping());
  }

  async runTurn(turn: AdapterTurn): Promise<AdapterTurnResult> {
    const context = this.#context as AdapterContext;
    if (this.#threadId === null) {
      const started = await this.#process.request(
        'thread/start',
        { model: this.#options.model_id, cwd: context.workDir, ephemeral: true },
        threadStartedSchema,
        turn.signal,
      );
      this.#threadId = started.thread.id;
      // Codex sends its thread id as `thread-id` on every model request: only this thread's
      // requests may reach this sample's trajectory.
      context.pinAgentSession?.(this.#threadId, 'thread-id');
    }
    const threadId = this.#threadId;
    const current: { id: string | null } = { id: null };
    this.#turn = current;
    const ended = this.#turnEnd(threadId, current);
    const interrupt = () => void this.abort();
    turn.signal.addEventListener('abort', interrupt, { once: true });
    let end: TurnEnd;
    try {
      const started = await this.#process.request(
        'turn/start',
        { threadId, input: [{ type: 'text', text: turn.text, text_elements: [] }] },
        turnStartedSchema,
      );
      current.id = started.turn.id;
      if (turn.signal.aborted) interrupt();
      end = await Promise.race([ended.promise, interrupted(turn.signal)]);
    } finally {
      ended.stop();
      turn.signal.removeEventListener('abort', interrupt);
      this.#turn = null;
    }
    if (turn.signal.aborted || end.status === 'interrupted')
      throw new DressageError({ code: 'cancelled', message: 'codex turn was interrupted' });
    await context.drainModelRequests();
    if (end.status !== 'completed') throw codexFailure(end.error ?? `the turn ended ${end.status}`);
    return { outputs: codexItemsToChat(end.items), backendSessionId: threadId };
  }

  // Collects the thread's completed items until its turn completes (or the server exits).
  #turnEnd(threadId: string, current: { id: string | null }) {
    const items: CodexItem[] = [];
    let error: string | null = null;
    let stop = () => {};
    const promise = new Promise<TurnEnd>((resolve, reject) => {
      const exited = () =>
        reject(new DressageError({ code: 'unavailable', message: `codex exited: ${this.#process.tail}` }));
      const stopListening = this.#process.onNotification((method, params) => {
        if (method === 'item/completed') {
          const parsed = codexItemCompletedSchema.safeParse(params);
          if (parsed.success && parsed.data.threadId === threadId) items.push(parsed.data.item);
        } else if (method === 'error') {
          const parsed = errorNotificationSchema.safeParse(params);
          if (parsed.success && parsed.data.threadId === threadId && parsed.data.willRetry !== true)
            error = parsed.data.error.message;
        } else if (method === 'turn/completed') {
          const parsed = turnCompletedSchema.safeParse(params);
          if (!parsed.success || parsed.data.threadId !== threadId) return;
          if (current.id !== null && parsed.data.turn.id !== current.id) return;
          resolve({
            status: parsed.data.turn.status,
            error: parsed.data.turn.error?.message ?? error,
            items,
          });
        }
      });
      const stopWatching = this.#process.onClose(exited);
      stop = () => {
        stopListening();
        stopWatching();
      };
      if (!this.#process.running) exited();
    });
    // Awaited only once `turn/start` answered: an exit before that must not be an unhandled rejection.
    promise.catch(() => undefined);
    return { promise, stop: () => stop() };
  }

  /** Interrupts the turn Codex is running; nothing to do once it completed. */
  async abort(): Promise<void> {
    const turnId = this.#turn?.id;
    if (this.#threadId === null || turnId === undefined || turnId === null || !this.#process.running) return;
    await this.#process
      .request('turn/interrupt', { threadId: this.#threadId, turnId }, z.unknown(), AbortSignal.timeout(5000))
      .catch(() => undefined);
  }

  /**
   * Drops the sample just served while `codex app-server` keeps running: its turn is interrupted,
   * its ephemeral thread (never written to disk) unsubscribed, as `codex exec` does at its end, and
   * with `thread_unload_delay_secs = 0` unloaded there and then (none may stay loaded), and the
   * agent's home is emptied but for Codex's own start-up files (config, state databases,
   * installation id), its config written anew.
   */
  async recycle(): Promise<void> {
    if (!this.#process.running)
      throw new DressageError({
        code: 'unavailable',
        message: `codex is not running: ${this.#process.tail}`,
      });
    const context = this.#context as AdapterContext;
    const signal = () => AbortSignal.timeout(10_000);
    await this.abort();
    const threadId = this.#threadId;
    if (threadId !== null) {
      // Codex unloads the thread once its writer has shut down, and says so with `thread/closed`.
      let stopListening = () => {};
      const closed = new Promise<void>((resolve) => {
        stopListening = this.#process.onNotification((method, params) => {
          if (method === 'thread/closed' && threadClosedSchema.safeParse(params).data?.threadId === threadId)
            resolve();
        });
      });
      try {
        await this.#process.request('thread/unsubscribe', { threadId }, z.unknown(), signal());
        await Promise.race([closed, sleep(5000, { unref: true })]);
      } finally {
        stopListening();
      }
    }
    this.#threadId = null;
    const loaded = await this.#process.request('thread/loaded/list', {}, loadedThreadsSchema, signal());
    if (loaded.data.length > 0)
      throw new DressageError({
        code: 'internal',
        message: `codex kept ${loaded.data.length} thread(s) loaded`,
      });
    const home = this.#home(context);
    await removeAllBut(home, ['.codex', '.codex-sqlite']);
    await removeAllBut(join(home, '.codex'), this.#baseline);
    // Per-thread files, even where they existed at start-up.
    for (const dir of ['sessions', 'shell_snapshots', 'log', 'memories', 'history.jsonl'])
      await rm(join(home, '.codex', dir), { recursive: true, force: true });
    await this.#writeConfig(context);
  }

  async rebind(context: AdapterContext): Promise<void> {
    this.#context = context;
    this.#threadId = null;
  }

  processGroups(): number[] {
    const pid = this.#process.pid;
    return pid !== null && this.#process.running ? [pid] : [];
  }

  async close(): Promise<void> {
    await this.#process.stop();
  }
}
