import { type ChildProcess, spawn } from 'node:child_process';
import { DressageError } from '@dressage/protocol';
import { z } from 'zod';
import { stopProcessGroup } from './agent-process.js';

// One JSON-RPC 2.0 message: a request or notification (`method`), or the answer to one of ours.
const jsonRpcMessageSchema = z.looseObject({
  id: z.union([z.number(), z.string(), z.null()]).optional(),
  method: z.string().optional(),
  params: z.unknown().optional(),
  result: z.unknown().optional(),
  error: z
    .looseObject({ code: z.number().optional(), message: z.string().optional() })
    .optional()
    .catch({ message: 'an error the agent did not describe' }),
});

type JsonRpcMessage = z.infer<typeof jsonRpcMessageSchema>;

/** Called with each notification the agent sends: its method and (unparsed) params. */
export type JsonRpcNotificationListener = (method: string, params: unknown) => void;

/**
 * An agent server speaking JSON-RPC, one message a line, over its stdin and stdout (the Agent
 * Client Protocol of `qwen --acp`, Codex's `codex app-server`), as a long-lived process in its own
 * process group. Requests the agent makes of the client are refused with -32601 (method not
 * found), so that it uses no client feature (files, terminals, permission prompts).
 */
export class JsonRpcAgentProcess {
  #child: ChildProcess | null = null;
  #buffer = '';
  #output = '';
  #nextId = 0;
  readonly #pending = new Map<
    number,
    { resolve: (value: unknown) => void; reject: (error: Error) => void }
  >();
  readonly #listeners = new Set<JsonRpcNotificationListener>();
  readonly #closeListeners = new Set<() => void>();

  /** The last few KiB of its stderr, for error messages. */
  get tail(): string {
    return this.#output.slice(-4000);
  }

  get running(): boolean {
    const child = this.#child;
    return child !== null && child.exitCode === null && child.signalCode === null;
  }

  /** Its process (and process group) id, or null. */
  get pid(): number | null {
    return this.#child?.pid ?? null;
  }

  start(argv: readonly string[], options: { cwd: string; env: NodeJS.ProcessEnv }): void {
    const [command, ...args] = argv;
    const child = spawn(command as string, args, {
      cwd: options.cwd,
      env: options.env,
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    child.stdin?.on('error', () => {});
    child.stdout?.on('data', (chunk: Buffer) => this.#read(chunk.toString('utf8')));
    child.stderr?.on('data', (chunk: Buffer) => {
      this.#output = (this.#output + chunk.toString('utf8')).slice(-16_000);
    });
    child.on('error', (error) => {
      this.#output += `spawn error: ${error.message}\n`;
    });
    child.on('close', () => {
      for (const listener of this.#closeListeners) listener();
      for (const { reject } of this.#pending.values())
        reject(new DressageError({ code: 'unavailable', message: `the agent exited: ${this.tail}` }));
      this.#pending.clear();
    });
    this.#child = child;
  }

  /**
   * Calls `method` and resolves with its result parsed by `result` (rejects with its error, when the
   * result does not parse, or when the agent exits).
   */
  async request<TSchema extends z.ZodType>(
    method: string,
    params: object,
    result: TSchema,
    signal?: AbortSignal,
  ): Promise<z.output<TSchema>> {
    const answer = await this.#call(method, params, signal);
    const parsed = result.safeParse(answer);
    if (parsed.success) return parsed.data;
    throw new DressageError({
      code: 'unavailable',
      message: `the agent answered ${method} with an unexpected result: ${parsed.error.message}`,
      details: { result: answer },
    });
  }

  #call(method: string, params: object, signal?: AbortSignal): Promise<unknown> {
    if (!this.running)
      return Promise.reject(
        new DressageError({ code: 'unavailable', message: `the agent is not running: ${this.tail}` }),
      );
    const id = ++this.#nextId;
    return new Promise<unknown>((resolve, reject) => {
      const onAbort = () => {
        this.#pending.delete(id);
        reject(new DressageError({ code: 'cancelled', message: `${method} was aborted` }));
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#pending.set(id, {
        resolve: (value) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(value);
        },
        reject: (error) => {
          signal?.removeEventListener('abort', onAbort);
          reject(error);
        },
      });
      this.#send({ jsonrpc: '2.0', id, method, params });
    });
  }

  /**
   * True when the agent answers a request (an unknown method's -32601 error counts) within
   * `timeoutMs`; false when it has exited or does not answer.
   */
  async ping(timeoutMs = 5000): Promise<boolean> {
    if (!this.running) return false;
    try {
      await this.#call('dressage/ping', {}, AbortSignal.timeout(timeoutMs));
      return true;
    } catch (error) {
      return DressageError.isInstance(error) && error.details.error !== undefined;
    }
  }

  /** Sends a notification (no answer). */
  notify(method: string, params: object): void {
    if (this.running) this.#send({ jsonrpc: '2.0', method, params });
  }

  /** Calls `listener` when the process exits, until the returned function is called. */
  onClose(listener: () => void): () => void {
    this.#closeListeners.add(listener);
    return () => this.#closeListeners.delete(listener);
  }

  /** Calls `listener` with every notification until the returned function is called. */
  onNotification(listener: JsonRpcNotificationListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async stop(): Promise<void> {
    const child = this.#child;
    this.#child = null;
    await stopProcessGroup(child);
  }

  #send(message: object): void {
    this.#child?.stdin?.write(`${JSON.stringify(message)}\n`);
  }

  #read(text: string): void {
    this.#buffer += text;
    for (let newline = this.#buffer.indexOf('\n'); newline >= 0; newline = this.#buffer.indexOf('\n')) {
      const line = this.#buffer.slice(0, newline).trim();
      this.#buffer = this.#buffer.slice(newline + 1);
      if (line === '') continue;
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch {
        continue;
      }
      const message = jsonRpcMessageSchema.safeParse(value);
      if (message.success) this.#dispatch(message.data);
    }
  }

  #dispatch(message: JsonRpcMessage): void {
    const id = message.id;
    if (typeof message.method === 'string') {
      if (id !== undefined && id !== null) {
        this.#send({
          jsonrpc: '2.0',
          id,
          error: { code: -32601, message: `${message.method} is not supported` },
        });
        return;
      }
      for (const listener of this.#listeners) listener(message.method, message.params);
      return;
    }
    if (typeof id !== 'number') return;
    const pending = this.#pending.get(id);
    if (!pending) return;
    this.#pending.delete(id);
    if (message.error !== undefined) {
      const error = message.error;
      pending.reject(
        new DressageError({
          code: 'unavailable',
          message: `the agent answered an error: ${String(error.message ?? JSON.stringify(error))}`,
          details: { error },
        }),
      );
    } else pending.resolve(message.result ?? {});
  }
}
