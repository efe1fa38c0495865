import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
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
import { AgentProcess, agentEnv, freePort, removeAllBut } from './agent-process.js';
import { opencodeMessageSchema, opencodeMessagesToChat } from './opencode-messages.js';

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

// A session of `opencode serve` as its API answers (`POST /session`, `GET /session`).
const sessionSchema = z.looseObject({ id: z.string().min(1) });

/** The opencode.json the adapter writes (opencode's config schema: https://opencode.ai/config.json). */
export interface OpencodeConfig {
  $schema: string;
  provider: Record<
    string,
    {
      npm: string;
      name: string;
      options: { baseURL: string; apiKey: string; timeout: number };
      models: Record<string, { name: string; tools: boolean; limit?: OpencodeOptions['model_limit'] }>;
    }
  >;
  model: string;
  small_model: string;
  permission: Record<string, 'allow' | 'ask' | 'deny'>;
  share: 'disabled';
  autoupdate: boolean;
  snapshot: boolean;
  agent: { title: { disable: boolean }; build?: { prompt: string } };
  compaction?: OpencodeOptions['compaction'];
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
  // A message was posted and its answer has not come back: opencode may still be running it.
  #messageInFlight = false;
  #configBaseline = new Set<string>();

  constructor(options: unknown) {
    this.#options = parseAdapterOptions(opencodeOptionsSchema, options, 'opencode');
  }

  get #base(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** The opencode.json written for the agent. */
  configFor(context: AdapterContext): OpencodeConfig {
    const o = this.#options;
    const model: OpencodeConfig['provider'][string]['models'][string] = { name: o.model_name, tools: true };
    if (o.model_limit) model.limit = o.model_limit;
    const config: OpencodeConfig = {
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
      // No git snapshots of the work tree: they would keep a sample's files in opencode's data dir.
      snapshot: false,
      agent: { title: { disable: true } },
    };
    if (o.compaction) config.compaction = o.compaction;
    return config;
  }

  // opencode.json and the system prompt, in the agent's config dir.
  async #writeConfig(context: AdapterContext): Promise<void> {
    const configDir = join(context.runtimeDir, 'home', '.config', 'opencode');
    await mkdir(join(configDir, 'prompts'), { recursive: true });
    const config = this.configFor(context);
    if (context.systemPrompt !== null) {
      await writeFile(join(configDir, 'prompts', 'build.txt'), context.systemPrompt);
      config.agent.build = { prompt: '{file:./prompts/build.txt}' };
    }
    await writeFile(join(configDir, 'opencode.json'), JSON.stringify(config, null, 2));
  }

  async init(context: AdapterContext): Promise<void> {
    this.#context = context;
    const home = join(context.runtimeDir, 'home');
    await this.#writeConfig(context);
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
      if (await this.health()) {
        // What opencode put in its config dir at start-up (its plugin install): kept on recycle.
        this.#configBaseline = new Set(await readdir(join(home, '.config', 'opencode')));
        return;
      }
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
      const body = z.looseObject({ healthy: z.boolean() }).safeParse(await response.json());
      return response.ok && body.success && body.data.healthy;
    } catch {
      return false;
    }
  }

  // One call of opencode's server API; its answer parsed by `answer`.
  async #call<TSchema extends z.ZodType>(
    method: string,
    path: string,
    body: unknown,
    answer: TSchema,
    signal?: AbortSignal,
  ): Promise<z.output<TSchema>> {
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
    let value: unknown = null;
    try {
      value = text === '' ? null : JSON.parse(text);
    } catch {
      // Not JSON: the schema below names what was expected.
    }
    const parsed = answer.safeParse(value);
    if (parsed.success) return parsed.data;
    throw new DressageError({
      code: 'unavailable',
      message: `opencode ${method} ${path} answered an unexpected body: ${parsed.error.message}`,
    });
  }

  async runTurn(turn: AdapterTurn): Promise<AdapterTurnResult> {
    const context = this.#context as AdapterContext;
    if (this.#sessionId === null) {
      const created = await this.#call('POST', '/session', {}, sessionSchema, turn.signal);
      this.#sessionId = created.id;
      // opencode sends its session id as `x-session-id` on every model request: only this
      // session's requests may reach this sample's trajectory.
      context.pinAgentSession?.(this.#sessionId);
    }
    const o = this.#options;
    // Cleared only by an answer: a request that failed or was cancelled may leave opencode running it.
    this.#messageInFlight = true;
    await this.#call(
      'POST',
      `/session/${this.#sessionId}/message`,
      {
        parts: [{ type: 'text', text: turn.text }],
        agent: 'build',
        model: { providerID: o.provider_id, modelID: o.model_id },
      },
      z.unknown(),
      turn.signal,
    );
    this.#messageInFlight = false;
    // The reply can be returned before the last streamed model request has closed.
    await context.drainModelRequests();
    const all = await this.#call(
      'GET',
      `/session/${this.#sessionId}/message`,
      undefined,
      z.array(opencodeMessageSchema),
      turn.signal,
    );
    const fresh = all.slice(this.#seen);
    this.#seen = all.length;
    return { outputs: opencodeMessagesToChat(fresh), backendSessionId: this.#sessionId };
  }

  /** Stops the message opencode may be running; nothing to do once its answer came back. */
  async abort(): Promise<void> {
    if (this.#sessionId === null || !this.#messageInFlight || !this.#process.running) return;
    await this.#call(
      'POST',
      `/session/${this.#sessionId}/abort`,
      {},
      z.unknown(),
      AbortSignal.timeout(5000),
    ).then(
      () => {
        this.#messageInFlight = false;
      },
      () => undefined,
    );
  }

  /**
   * Drops the sample just served while `opencode serve` keeps running: every opencode session is
   * deleted through its server API, which removes its messages and history (anomalyco/opencode
   * packages/opencode/src/server/routes/session.ts: `GET /session` is `session.list`, `DELETE
   * /session/:sessionID` is `session.delete` → `Session.remove`, "permanently remove all
   * associated data, including messages and history"), and the agent's home is emptied but for
   * opencode's own config, data and cache (its config files are written anew).
   */
  async recycle(): Promise<void> {
    if (!this.#process.running)
      throw new DressageError({
        code: 'unavailable',
        message: `opencode is not running: ${this.#process.tail}`,
      });
    const context = this.#context as AdapterContext;
    const signal = () => AbortSignal.timeout(10_000);
    if (this.#sessionId !== null) await this.abort();
    this.#sessionId = null;
    this.#seen = 0;
    const sessions = await this.#call('GET', '/session', undefined, z.array(sessionSchema), signal());
    for (const session of sessions) {
      await this.#call(
        'DELETE',
        `/session/${encodeURIComponent(session.id)}`,
        undefined,
        z.unknown(),
        signal(),
      );
    }
    const [left] = await Promise.all([
      this.#call('GET', '/session', undefined, z.array(sessionSchema), signal()),
      this.#emptyHome(join(context.runtimeDir, 'home')),
    ]);
    if (left.length > 0)
      throw new DressageError({ code: 'internal', message: `opencode kept ${left.length} session(s)` });
    await this.#writeConfig(context);
  }

  // Everything in the agent's home but opencode's own directories; in those, its snapshots, logs
  // and whatever was added to its config dir after start-up.
  async #emptyHome(home: string): Promise<void> {
    await removeAllBut(home, ['.config', '.local', '.cache']);
    await removeAllBut(join(home, '.config'), ['opencode']);
    await removeAllBut(join(home, '.config', 'opencode'), this.#configBaseline);
    await removeAllBut(join(home, '.local'), ['share', 'state']);
    await removeAllBut(join(home, '.local', 'share'), ['opencode']);
    await removeAllBut(join(home, '.local', 'state'), ['opencode']);
    await removeAllBut(join(home, '.cache'), ['opencode']);
    for (const dir of ['snapshot', 'log'])
      await rm(join(home, '.local', 'share', 'opencode', dir), { recursive: true, force: true });
  }

  async rebind(context: AdapterContext): Promise<void> {
    this.#context = context;
    this.#sessionId = null;
    this.#seen = 0;
  }

  processGroups(): number[] {
    const pid = this.#process.pid;
    return pid !== null && this.#process.running ? [pid] : [];
  }

  async close(): Promise<void> {
    await this.#process.stop();
  }
}
