import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  type ChatCompletionResponse,
  chatCompletionChunkSchema,
  chatCompletionResponseSchema,
  DressageError,
  safeParseWire,
  type Usage,
} from '@dressage/protocol';
import {
  HttpError,
  RouteTable,
  readBody,
  type ServeHandler,
  SseWriter,
  sendJson,
  serve,
  sseDoneFrame,
  sseFrame,
} from '@dressage/protocol/http';
import { bearerMatches, secretsEqual, Waiters } from '@dressage/protocol/internal';
import {
  anthropicErrorBody,
  anthropicMessagesRequestSchema,
  anthropicRequestToChat,
  chatToAnthropicResponse,
  writeAnthropicStream,
} from './anthropic-messages.js';
import {
  chatToResponsesResponse,
  responsesRequestSchema,
  responsesRequestToChat,
  writeResponsesStream,
} from './openai-responses.js';
import type { ProxyOptions } from './schemas.js';
import {
  contextOverflowIncidentSchema,
  upstreamErrorCode,
  upstreamErrorMessage,
  upstreamStreamErrorSchema,
} from './upstream-errors.js';

/** Proxy errors of the Dressage proxy that invalidate the rollout in flight. */
export const invalidatingErrors = new Set([
  'generation_preempted',
  'partial_rollout_staleness_exceeded',
  'trajectory_version_changed',
]);

/** A model-request failure the adapter must turn into a turn outcome. */
export type ProxyIncident =
  | { kind: 'max_steps'; maxSteps: number; attemptedStep: number }
  | { kind: 'context_overflow'; message: string; details: Record<string, unknown> }
  | { kind: 'rollout_invalidated'; error: string; message: string; body: unknown };

/** The sample an LLM proxy attributes its requests to. */
export interface ProxyBinding {
  sessionId: string;
  instanceId: string;
  sandboxId: string | null;
}

/** Options of {@link RolloutLlmProxy}. */
export interface RolloutLlmProxyOptions {
  /** Origin of the Dressage proxy (or any OpenAI-compatible server), e.g. `http://10.0.0.2:8800`. */
  upstreamOrigin: string;
  /** API path of the upstream, e.g. `/v1`. */
  apiPath: string;
  sessionId: string;
  instanceId: string;
  sandboxId?: string | null;
  proxy: ProxyOptions;
  /** Milliseconds before an upstream request is abandoned. */
  timeoutMs?: number;
  /** Replaces `model` in every request. */
  modelOverride?: string | null;
  /** Called on max steps, context overflow or an invalidated rollout (the adapter aborts the agent). */
  onIncident?: (incident: ProxyIncident) => void;
  /**
   * Key every request but the health probe must carry (`Authorization: Bearer <key>` or
   * `x-api-key: <key>`); the adapter gives it to the agent as its API key. In a pool the slots
   * share the host network: without it another slot's agent could post model calls into this
   * session's trajectory. It is never forwarded upstream.
   */
  apiKey?: string;
  /**
   * Largest request body an agent may send, in bytes (413 above it). Default 64 MiB: the recording
   * proxy upstream has its own, usually lower, limit; this one bounds what the agent's process can
   * make this one hold.
   */
  maxRequestBytes?: number;
}

/** The default {@link RolloutLlmProxyOptions.maxRequestBytes}. */
const defaultLlmProxyMaxRequestBytes = 64 * 1024 ** 2;

/** Counters of the turn currently open on the proxy. */
export interface TurnCounters {
  turnId: string;
  steps: number;
  inputTokens: number;
  outputTokens: number;
  reasoningTokens: number;
  incident: ProxyIncident | null;
}

const strippedHeaders = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'accept-encoding',
  'connection',
  'keep-alive',
  'x-session-id',
  'x-instance-id',
  'x-turn-id',
  'authorization',
  'x-api-key',
  'anthropic-version',
  'anthropic-beta',
]);

/**
 * An agent's model request as it is forwarded: the keys the proxy reads or sets; every other key
 * passes through to the upstream untouched.
 */
interface ForwardedRequest {
  model?: unknown;
  stream?: unknown;
  stream_options?: unknown;
  temperature?: unknown;
  [key: string]: unknown;
}

function isForwardedRequest(value: unknown): value is ForwardedRequest {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

type ModelApi = 'chat' | 'anthropic' | 'responses';

function modelApiOf(method: string | undefined, path: string): ModelApi | null {
  if (method !== 'POST') return null;
  const bare = path.split('?')[0] ?? '';
  if (bare.endsWith('/chat/completions')) return 'chat';
  if (bare.endsWith('/messages')) return 'anthropic';
  if (bare.endsWith('/responses')) return 'responses';
  return null;
}

/** An empty assistant completion, sent to an agent whose rollout was invalidated so that it stops. */
export function syntheticEmptyCompletion(model: string): ChatCompletionResponse {
  return {
    id: 'chatcmpl-rollout-invalidated',
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: '' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
  };
}

/**
 * The in-process LLM proxy of a BlackboxServer: the one endpoint an agent may call for its model.
 * It pins every request to the bound session and open turn (Dressage headers), counts steps and
 * enforces max steps, blocks while paused, drains the Dressage stream heartbeats, bridges the
 * Anthropic Messages and OpenAI Responses APIs onto chat completions, and turns Dressage proxy
 * errors into incidents the server maps to turn outcomes.
 */
export class RolloutLlmProxy {
  #server: Server | null = null;
  #origin = '';
  #paused = false;
  readonly #resumed = new Waiters();
  readonly #drained = new Waiters();
  #inflight = 0;
  #turn: TurnCounters | null = null;
  #expectedVersion: string | null = null;

  readonly #options: RolloutLlmProxyOptions;
  #binding: ProxyBinding | null;
  #agentSession: string | null = null;
  #agentSessionHeader = 'x-session-id';

  constructor(options: RolloutLlmProxyOptions) {
    this.#options = options;
    this.#binding = {
      sessionId: options.sessionId,
      instanceId: options.instanceId,
      sandboxId: options.sandboxId ?? null,
    };
  }

  /** The sample requests are attributed to, or null between two samples of a kept agent. */
  get binding(): ProxyBinding | null {
    return this.#binding;
  }

  // The bound sample; #handle refuses model requests before this is asked while unbound.
  get #bound(): ProxyBinding {
    if (this.#binding === null)
      throw new DressageError({ code: 'failed_precondition', message: 'no sample is bound to this agent' });
    return this.#binding;
  }

  /**
   * Attributes every later request to another sample: a kept agent serves the next one. The open
   * turn and the pinned agent session are dropped.
   */
  rebind(binding: ProxyBinding): void {
    this.#binding = { ...binding };
    this.#agentSession = null;
    this.#turn = null;
  }

  /** Refuses every model request (503) until {@link rebind}: a kept agent is between samples. */
  unbind(): void {
    this.#binding = null;
    this.#agentSession = null;
    this.#turn = null;
  }

  /**
   * Accepts only requests whose own `header` (default `x-session-id`; Codex sends `thread-id`) is
   * `agentSessionId` (the agent's session of the bound sample; null accepts any): a request a kept
   * agent still sends for an earlier sample's session is refused with 409 rather than recorded in
   * this sample's trajectory.
   */
  pinAgentSession(agentSessionId: string | null, header = 'x-session-id'): void {
    this.#agentSession = agentSessionId;
    this.#agentSessionHeader = header.toLowerCase();
  }

  /** `http://127.0.0.1:<port>` once started. */
  get url(): string {
    return this.#origin;
  }

  /** Model requests in flight. */
  get inflightRequests(): number {
    return this.#inflight;
  }

  get isPaused(): boolean {
    return this.#paused;
  }

  get version(): string | null {
    return this.#expectedVersion;
  }

  async start(): Promise<string> {
    // One route of its own; every other request is the agent's, for the model or passed through.
    const routes = new RouteTable<ServeHandler>().add('GET', '/__proxy_health', (_, response) =>
      sendJson(response, 200, { ok: true }),
    );
    const server = createServer(
      serve(routes, {
        notFound: (request, response) => this.#handle(request, response),
        onError: (error, _request, response) => {
          if (!response.headersSent) {
            sendJson(response, 502, {
              error: { message: `LLM proxy failure: ${String(error)}`, type: 'proxy_error' },
            });
          } else response.destroy();
        },
      }),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    this.#server = server;
    this.#origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return this.#origin;
  }

  async close(): Promise<void> {
    this.resume(null);
    const server = this.#server;
    this.#server = null;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Starts counting steps for a turn; the previous turn's counters are returned and dropped. */
  openTurn(turnId: string): void {
    this.#turn = { turnId, steps: 0, inputTokens: 0, outputTokens: 0, reasoningTokens: 0, incident: null };
  }

  /** Ends the open turn and returns its counters. */
  closeTurn(): TurnCounters | null {
    const turn = this.#turn;
    this.#turn = null;
    return turn;
  }

  /** The open turn's counters. */
  get currentTurn(): TurnCounters | null {
    return this.#turn;
  }

  /** Blocks new model requests until {@link resume}. */
  pause(): void {
    this.#paused = true;
  }

  /** Lets blocked model requests go; a version learned here is pinned on later requests. */
  resume(version: string | number | null | undefined): void {
    if (version !== null && version !== undefined) this.#expectedVersion = String(version);
    this.#paused = false;
    this.#resumed.wakeAll();
  }

  /** Resolves when no model request is in flight (or after `timeoutMs`, with false). */
  drain(timeoutMs = Number.POSITIVE_INFINITY): Promise<boolean> {
    if (this.#inflight === 0) return Promise.resolve(true);
    return this.#drained.wait({ timeoutMs });
  }

  /** Sends the rollout pause to the Dressage proxy upstream (its pause is global). */
  async pauseUpstream(reason: string, timeoutSeconds: number | null): Promise<unknown> {
    return this.#postUpstream('/rollout/pause', {
      session_id: this.#bound.sessionId,
      instance_id: this.#bound.instanceId,
      reason,
      mode: 'preempt',
      ...(timeoutSeconds === null ? {} : { timeout_seconds: timeoutSeconds }),
    });
  }

  /** Sends the rollout resume to the Dressage proxy upstream. */
  async resumeUpstream(reason: string, version: string | number | null): Promise<unknown> {
    return this.#postUpstream('/rollout/resume', {
      session_id: this.#bound.sessionId,
      instance_id: this.#bound.instanceId,
      reason,
      version,
    });
  }

  async #postUpstream(path: string, body: unknown): Promise<unknown> {
    const response = await fetch(`${this.#options.upstreamOrigin}${this.#options.apiPath}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-session-id': this.#bound.sessionId,
        'x-instance-id': this.#bound.instanceId,
      },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Not JSON: keep the text.
    }
    if (!response.ok) {
      throw new DressageError({
        code: 'unavailable',
        message: `upstream ${path} answered ${response.status}: ${text.slice(0, 300)}`,
        details: { status: response.status },
      });
    }
    return parsed;
  }

  #forwardHeaders(incoming: IncomingHttpHeaders): Record<string, string> {
    const sticky = this.#options.proxy.sticky_header_name.toLowerCase();
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(incoming)) {
      const lower = name.toLowerCase();
      if (value === undefined || strippedHeaders.has(lower) || lower === sticky) continue;
      if (lower.startsWith('x-dressage-') || lower.startsWith('x-stainless-')) continue;
      headers[lower] = Array.isArray(value) ? value.join(', ') : value;
    }
    headers[sticky] = this.#bound.sessionId;
    headers['x-session-id'] = this.#bound.sessionId;
    headers['x-instance-id'] = this.#bound.instanceId;
    if (this.#turn) headers['x-turn-id'] = this.#turn.turnId;
    if (this.#bound.sandboxId) headers['x-dressage-sandbox-id'] = this.#bound.sandboxId;
    headers['x-dressage-partial-rollout'] = '1';
    if (this.#expectedVersion !== null) headers['x-dressage-expected-version'] = this.#expectedVersion;
    headers['accept-encoding'] = 'identity';
    return headers;
  }

  #authorized(request: IncomingMessage): boolean {
    const key = this.#options.apiKey;
    if (key === undefined) return true;
    const apiKeyHeader = request.headers['x-api-key'];
    if (typeof apiKeyHeader === 'string' && secretsEqual(apiKeyHeader, key)) return true;
    return bearerMatches(request.headers.authorization, key);
  }

  // The body of an agent's request with its key checked, or null once answered (401, or 413 over
  // the size limit).
  async #admittedBody(request: IncomingMessage, response: ServerResponse): Promise<Buffer | null> {
    if (!this.#authorized(request)) {
      request.resume();
      sendJson(response, 401, {
        error: { message: 'missing or wrong API key for this LLM proxy', type: 'authentication_error' },
      });
      return null;
    }
    try {
      return await readBody(request, {
        limit: this.#options.maxRequestBytes ?? defaultLlmProxyMaxRequestBytes,
        response,
      });
    } catch (error) {
      if (!(error instanceof HttpError)) throw error;
      sendJson(response, error.status, {
        error: { message: error.message, type: 'invalid_request_error', code: 'request_too_large' },
      });
      return null;
    }
  }

  // Counts one model request of the open turn; false once answered 429 past `max_steps` (recorded as
  // the turn's incident).
  #takeStep(response: ServerResponse, api: ModelApi): boolean {
    const turn = this.#turn;
    const maxSteps = this.#options.proxy.max_steps;
    if (turn && maxSteps !== null && turn.steps >= maxSteps) {
      const incident: ProxyIncident = { kind: 'max_steps', maxSteps, attemptedStep: turn.steps + 1 };
      turn.incident ??= incident;
      this.#options.onIncident?.(incident);
      const error = {
        message: 'Turn exceeded max_steps.',
        type: 'rate_limit_error',
        code: 'max_steps_exceeded',
        details: { max_steps: maxSteps, attempted_step: turn.steps + 1 },
      };
      sendJson(response, 429, api === 'anthropic' ? { type: 'error', error } : { error });
      return false;
    }
    if (turn) turn.steps += 1;
    return true;
  }

  async #handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const path = request.url ?? '/';
    const body = await this.#admittedBody(request, response);
    if (body === null) return;
    if (this.#binding === null)
      return sendJson(response, 503, {
        error: { message: 'no sample is bound to this agent', type: 'proxy_error', code: 'unbound' },
      });
    const agentSession = request.headers[this.#agentSessionHeader];
    if (this.#agentSession !== null && agentSession !== this.#agentSession)
      return sendJson(response, 409, {
        error: {
          message: `request of agent session ${String(agentSession)}, not of the bound sample's ${this.#agentSession}`,
          type: 'proxy_error',
          code: 'stale_agent_session',
        },
      });
    const api = modelApiOf(request.method, path);
    if (api === null) return this.#passThrough(request, response, path, body);

    while (this.#paused) await this.#resumed.wait();
    if (!this.#takeStep(response, api)) return;

    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch {
      return sendJson(response, 400, {
        error: { message: 'request body is not JSON', type: 'invalid_request_error' },
      });
    }
    if (!isForwardedRequest(parsed)) {
      return sendJson(response, 400, {
        error: { message: 'request body is not a JSON object', type: 'invalid_request_error' },
      });
    }
    const clientStream = parsed.stream === true;
    const chat = this.#chatRequestOf(api, parsed, response);
    if (chat === null) return;
    this.#prepareChatBody(chat, api === 'chat' && clientStream);
    const target =
      api === 'chat'
        ? `${this.#options.upstreamOrigin}${path}`
        : `${this.#options.upstreamOrigin}${this.#options.apiPath}/chat/completions`;

    this.#inflight += 1;
    try {
      const upstream = await fetch(target, {
        method: 'POST',
        headers: { ...this.#forwardHeaders(request.headers), 'content-type': 'application/json' },
        body: JSON.stringify(chat),
        signal: AbortSignal.timeout(this.#options.timeoutMs ?? 600_000),
      });
      if (api === 'chat' && clientStream && upstream.ok) {
        await this.#relayStream(upstream, response, String(chat.model ?? 'proxy-model'));
        return;
      }
      const text = await upstream.text();
      let json: unknown = text;
      try {
        json = JSON.parse(text);
      } catch {
        // Non-JSON bodies are relayed as they are.
      }
      if (!upstream.ok) {
        if (this.#recordError(upstream.status, json)) {
          return this.#sendSynthetic(response, api, clientStream, String(chat.model ?? 'proxy-model'));
        }
        if (api === 'anthropic')
          return sendJson(response, upstream.status, anthropicErrorBody(upstream.status, json));
        response.writeHead(upstream.status, {
          'content-type': upstream.headers.get('content-type') ?? 'application/json',
        });
        response.end(text);
        return;
      }
      // The agent gets OpenAI's shape or a 502 naming the field that is not.
      const checked = safeParseWire(chatCompletionResponseSchema, json, 'upstream chat completion');
      if (!checked.success) {
        return sendJson(response, 502, {
          error: { message: checked.error.message, type: 'proxy_error', code: 'bad_upstream_response' },
        });
      }
      const completion = checked.data;
      this.#countUsage(completion.usage);
      if (api === 'chat') {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(text);
      } else if (api === 'anthropic') {
        const converted = chatToAnthropicResponse(
          completion,
          String(parsed.model ?? chat.model ?? 'proxy-model'),
        );
        if (clientStream) writeAnthropicStream(response, converted);
        else sendJson(response, 200, converted);
      } else {
        const converted = chatToResponsesResponse(
          completion,
          String(parsed.model ?? chat.model ?? 'proxy-model'),
        );
        if (clientStream) writeResponsesStream(response, converted);
        else sendJson(response, 200, converted);
      }
    } finally {
      this.#inflight -= 1;
      if (this.#inflight === 0) {
        this.#drained.wakeAll();
      }
    }
  }

  // The request as a chat completion: a chat request passes through unread (the upstream checks it);
  // a Messages or Responses request is parsed here, and a bad one answered 400 in its API's shape.
  #chatRequestOf(api: ModelApi, parsed: ForwardedRequest, response: ServerResponse): ForwardedRequest | null {
    if (api === 'chat') return parsed;
    if (api === 'anthropic') {
      const checked = safeParseWire(anthropicMessagesRequestSchema, parsed, 'Messages request');
      if (checked.success) return anthropicRequestToChat(checked.data);
      sendJson(response, 400, {
        type: 'error',
        error: { type: 'invalid_request_error', message: checked.error.message },
      });
      return null;
    }
    const checked = safeParseWire(responsesRequestSchema, parsed, 'Responses request');
    if (checked.success) return responsesRequestToChat(checked.data);
    sendJson(response, 400, { error: { message: checked.error.message, type: 'invalid_request_error' } });
    return null;
  }

  #prepareChatBody(chat: ForwardedRequest, stream: boolean): void {
    if (this.#options.modelOverride) chat.model = this.#options.modelOverride;
    const temperature = this.#options.proxy.default_temperature;
    if (temperature !== null && (chat.temperature === undefined || chat.temperature === null)) {
      chat.temperature = temperature;
    }
    if (stream) {
      const streamOptions = chat.stream_options;
      chat.stream_options = {
        ...(typeof streamOptions === 'object' && streamOptions !== null ? streamOptions : {}),
        include_usage: true,
      };
    } else {
      chat.stream = false;
      delete chat.stream_options;
    }
  }

  // True when the error invalidates the rollout (the agent then gets a synthetic empty completion).
  #recordError(status: number, body: unknown): boolean {
    const code = upstreamErrorCode(body);
    if (status === 413 && code === 'context_overflow') {
      const { message, details } = contextOverflowIncidentSchema.parse(body);
      const incident: ProxyIncident = { kind: 'context_overflow', message, details };
      if (this.#turn) this.#turn.incident ??= incident;
      this.#options.onIncident?.(incident);
      return false;
    }
    if (status === 502 && code !== null && invalidatingErrors.has(code)) {
      const incident: ProxyIncident = {
        kind: 'rollout_invalidated',
        error: code,
        message: upstreamErrorMessage(body),
        body,
      };
      if (this.#turn) this.#turn.incident ??= incident;
      this.#options.onIncident?.(incident);
      return true;
    }
    return false;
  }

  #sendSynthetic(response: ServerResponse, api: ModelApi, stream: boolean, model: string): void {
    const completion = syntheticEmptyCompletion(model);
    if (api === 'anthropic') {
      const converted = chatToAnthropicResponse(completion, model);
      if (stream) writeAnthropicStream(response, converted);
      else sendJson(response, 200, converted);
      return;
    }
    if (api === 'responses') {
      const converted = chatToResponsesResponse(completion, model);
      if (stream) writeResponsesStream(response, converted);
      else sendJson(response, 200, converted);
      return;
    }
    if (!stream) {
      sendJson(response, 200, completion);
      return;
    }
    const chunk = {
      id: completion.id,
      object: 'chat.completion.chunk',
      created: completion.created,
      model,
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: 'stop' }],
    };
    new SseWriter(response).end(`${sseFrame(chunk)}${sseDoneFrame}`);
  }

  #countUsage(usage: Usage | null | undefined): void {
    const turn = this.#turn;
    if (!turn || usage === null || usage === undefined) return;
    turn.inputTokens += usage.prompt_tokens;
    turn.outputTokens += usage.completion_tokens;
    // OpenAI's breakdown beside the three counts the schema checks.
    const reasoning = (usage.completion_tokens_details as { reasoning_tokens?: unknown } | undefined)
      ?.reasoning_tokens;
    if (typeof reasoning === 'number' && Number.isFinite(reasoning)) turn.reasoningTokens += reasoning;
  }

  // Relays an SSE stream event by event, dropping the Dressage heartbeat comments. An error frame
  // before any data becomes a plain HTTP error with that status, as if the request had failed.
  async #relayStream(upstream: Response, response: ServerResponse, model: string): Promise<void> {
    const reader = upstream.body?.getReader();
    if (!reader) {
      response.writeHead(502).end();
      return;
    }
    const decoder = new TextDecoder();
    const stream = new SseWriter(response);
    let buffer = '';
    let started = false;
    const emit = (event: string): boolean => {
      const lines = event.split('\n').filter((line) => !line.startsWith(':') && line.trim() !== '');
      if (lines.length === 0) return true;
      const data = lines
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trim())
        .join('\n');
      if (!started && data !== '' && data !== '[DONE]') {
        let frame: unknown = null;
        try {
          frame = JSON.parse(data);
        } catch {
          frame = null;
        }
        const errorFrame = upstreamStreamErrorSchema.safeParse(frame);
        if (errorFrame.success) {
          const body = errorFrame.data;
          const status = body.error.status_code ?? 500;
          const flat = { ...body.error, ...body };
          if (this.#recordError(status, flat)) {
            this.#sendSynthetic(response, 'chat', true, model);
          } else {
            sendJson(response, status, body);
          }
          return false;
        }
      }
      started = true;
      if (data !== '' && data !== '[DONE]') {
        try {
          const chunk = chatCompletionChunkSchema.safeParse(JSON.parse(data));
          if (chunk.success) this.#countUsage(chunk.data.usage);
        } catch {
          // Not JSON: relayed untouched.
        }
      }
      stream.write(`${lines.join('\n')}\n\n`);
      return true;
    };
    while (true) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replaceAll('\r\n', '\n');
      let boundary = buffer.indexOf('\n\n');
      while (boundary !== -1) {
        const event = buffer.slice(0, boundary);
        buffer = buffer.slice(boundary + 2);
        if (!emit(event)) {
          await reader.cancel().catch(() => undefined);
          return;
        }
        boundary = buffer.indexOf('\n\n');
      }
    }
    if (buffer.trim() !== '' && !emit(buffer)) return;
    stream.end();
  }

  async #passThrough(
    request: IncomingMessage,
    response: ServerResponse,
    path: string,
    body: Buffer,
  ): Promise<void> {
    const upstream = await fetch(`${this.#options.upstreamOrigin}${path}`, {
      method: request.method,
      headers: this.#forwardHeaders(request.headers),
      body: request.method === 'GET' || request.method === 'HEAD' ? undefined : body,
      signal: AbortSignal.timeout(this.#options.timeoutMs ?? 600_000),
    });
    const text = Buffer.from(await upstream.arrayBuffer());
    response.writeHead(upstream.status, {
      'content-type': upstream.headers.get('content-type') ?? 'application/octet-stream',
    });
    response.end(text);
  }
}
