import { type ChildProcess, spawn } from 'node:child_process';
import { DressageError } from '@dressage/protocol';
import type { BlackboxMessage } from '../blackbox/schemas.js';
import { stopProcessGroup } from './agent-process.js';

type Json = Record<string, unknown>;

/**
 * An agent speaking the Agent Client Protocol (JSON-RPC 2.0, one message a line, over its stdin and
 * stdout) as a long-lived process in its own process group: `initialize`, `session/new`,
 * `session/prompt` with `session/update` notifications, `session/cancel`. Requests the agent makes
 * of the client are refused with -32601 (method not found), so that it uses no client feature
 * (files, terminals, permission prompts).
 */
export class AcpAgentProcess {
  #child: ChildProcess | null = null;
  #buffer = '';
  #output = '';
  #nextId = 0;
  readonly #pending = new Map<number, { resolve: (value: Json) => void; reject: (error: Error) => void }>();
  readonly #listeners = new Set<(sessionId: string, update: Json) => void>();

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
      for (const { reject } of this.#pending.values())
        reject(new DressageError({ code: 'unavailable', message: `the agent exited: ${this.tail}` }));
      this.#pending.clear();
    });
    this.#child = child;
  }

  /** Calls `method` and resolves with its result (rejects with its error, or when the agent exits). */
  request(method: string, params: Json, signal?: AbortSignal): Promise<Json> {
    if (!this.running)
      return Promise.reject(
        new DressageError({ code: 'unavailable', message: `the agent is not running: ${this.tail}` }),
      );
    const id = ++this.#nextId;
    return new Promise<Json>((resolve, reject) => {
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
      await this.request('dressage/ping', {}, AbortSignal.timeout(timeoutMs));
      return true;
    } catch (error) {
      return DressageError.isInstance(error) && error.details.error !== undefined;
    }
  }

  /** Sends a notification (no answer). */
  notify(method: string, params: Json): void {
    if (this.running) this.#send({ jsonrpc: '2.0', method, params });
  }

  /** Calls `listener` with every `session/update` until the returned function is called. */
  onUpdate(listener: (sessionId: string, update: Json) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async stop(): Promise<void> {
    const child = this.#child;
    this.#child = null;
    await stopProcessGroup(child);
  }

  #send(message: Json): void {
    this.#child?.stdin?.write(`${JSON.stringify(message)}\n`);
  }

  #read(text: string): void {
    this.#buffer += text;
    for (let newline = this.#buffer.indexOf('\n'); newline >= 0; newline = this.#buffer.indexOf('\n')) {
      const line = this.#buffer.slice(0, newline).trim();
      this.#buffer = this.#buffer.slice(newline + 1);
      if (line === '') continue;
      let message: Json;
      try {
        message = JSON.parse(line) as Json;
      } catch {
        continue;
      }
      this.#dispatch(message);
    }
  }

  #dispatch(message: Json): void {
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
      if (message.method === 'session/update') {
        const params = (message.params ?? {}) as Json;
        for (const listener of this.#listeners)
          listener(String(params.sessionId), (params.update ?? {}) as Json);
      }
      return;
    }
    if (typeof id !== 'number') return;
    const pending = this.#pending.get(id);
    if (!pending) return;
    this.#pending.delete(id);
    if (message.error !== undefined) {
      const error = (message.error ?? {}) as Json;
      pending.reject(
        new DressageError({
          code: 'unavailable',
          message: `the agent answered an error: ${String(error.message ?? JSON.stringify(error))}`,
          details: { error },
        }),
      );
    } else pending.resolve((message.result ?? {}) as Json);
  }
}

/**
 * Converts the `session/update`s of one ACP prompt into chat messages: the agent's text (and
 * thoughts) up to a tool call become an assistant message carrying the calls, each finished call a
 * tool message, and the text after the last call the final assistant message.
 */
export function acpUpdatesToChat(updates: readonly Json[]): BlackboxMessage[] {
  const out: BlackboxMessage[] = [];
  let text = '';
  let reasoning = '';
  let calls: { id: string; name: string; input: unknown }[] = [];
  const results: BlackboxMessage[] = [];
  const inputs = new Map<string, unknown>();
  const flush = () => {
    if (text === '' && reasoning === '' && calls.length === 0) return;
    const message: BlackboxMessage = { role: 'assistant', content: text };
    if (reasoning !== '') message.reasoning_content = reasoning;
    if (calls.length > 0)
      message.tool_calls = calls.map((call) => ({
        id: call.id,
        type: 'function',
        function: { name: call.name, arguments: JSON.stringify(inputs.get(call.id) ?? call.input ?? {}) },
      }));
    out.push(message, ...results);
    text = '';
    reasoning = '';
    calls = [];
    results.length = 0;
  };
  const textOf = (content: unknown) => {
    const block = (content ?? {}) as Json;
    return block.type === 'text' ? String(block.text ?? '') : '';
  };
  for (const update of updates) {
    const kind = update.sessionUpdate;
    if (kind === 'agent_message_chunk' || kind === 'agent_thought_chunk') {
      // Text after a tool's result starts the next assistant message.
      if (results.length > 0) flush();
      if (kind === 'agent_message_chunk') text += textOf(update.content);
      else reasoning += textOf(update.content);
    } else if (kind === 'tool_call') {
      if (results.length > 0) flush();
      const meta = (update._meta ?? {}) as Json;
      calls.push({
        id: String(update.toolCallId ?? ''),
        name: String(meta.toolName ?? update.title ?? ''),
        input: update.rawInput,
      });
    } else if (kind === 'tool_call_update') {
      const id = String(update.toolCallId ?? '');
      const input = update.rawInput as Json | undefined;
      if (input && Object.keys(input).length > 0) inputs.set(id, input);
      if (update.status === 'completed' || update.status === 'failed') {
        const content = Array.isArray(update.content) ? (update.content as Json[]) : [];
        results.push({
          role: 'tool',
          tool_call_id: id,
          content: content.map((item) => textOf(item.content)).join(''),
        });
      }
    }
  }
  flush();
  return out;
}
