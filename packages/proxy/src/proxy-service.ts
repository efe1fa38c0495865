import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import {
  type CapabilitiesResponse,
  type ChatCompletionRequest,
  type ChatCompletionResponse,
  type ChatMessage,
  chatCompletionRequestSchema,
  type DiscardResponse,
  isRealVersion,
  type RolloutPauseResponse,
  type RolloutPauseState,
  type RolloutResumeResponse,
  type SglangSamplingParams,
  safeParseWire,
  type Tool,
  type ToolMessage,
  type TrajectoryReadResponse,
  type TrajectoryStats,
} from '@dressage/protocol';
import { sleep } from '@dressage/protocol/internal';
import type { z } from 'zod';
import type { ProxyConfig } from './config.js';
import { EngineClient } from './engine-client.js';
import { buildTrajectory, type FinalizeResult } from './finalize.js';
import { GenerationController, type GenerationOutput } from './generation-controller.js';
import { contextOverflowError, detailError } from './http-error.js';
import { identifierProblem } from './identifiers.js';
import { type ExtractedToolCall, OutputParser, type ParsedOutput } from './parsers.js';
import type { PromptTokenizer } from './prompt-tokenizer.js';
import {
  discardRequestSchema,
  finalizeRequestSchema,
  readRequestSchema,
  rolloutPauseRequestSchema,
  rolloutResumeRequestSchema,
} from './request-bodies.js';
import {
  type BodyLayout,
  continueBody,
  layoutOf,
  parseJson,
  type RawBodyMembers,
  type RawChatBody,
} from './request-bytes.js';
import { Session } from './session.js';
import { commitStep, type PlanOptions, planStep, type StepPlan } from './step-plan.js';
import {
  type HookMetadataSink,
  loadToolCallHooks,
  type ToolCallHook,
  ToolCallHookRunner,
} from './tool-call-hooks.js';
import { TrajectoryStore } from './trajectory-store.js';

/** Options of {@link ProxyService.create} beyond the configuration. */
export interface ProxyServiceOptions {
  /** Tool-call hooks registered in code; they run after those of `config.toolCallHooks`. */
  toolCallHooks?: readonly ToolCallHook[];
}

/** A chat request body, parsed and validated ({@link ProxyService.parseChatRequest}). */
export interface ParsedChatRequest {
  /**
   * The body's messages as JSON.parse gives them, when it came parsed; null when it came as bytes
   * (the next body is compared with those bytes, through {@link layout}).
   */
  rawMessages: unknown[] | null;
  /** The body's `tools` as JSON.parse gives them. */
  rawTools: unknown;
  body: ChatCompletionRequest;
  /** Where its messages lie in its bytes, when it came as bytes. */
  layout: BodyLayout | null;
}

/** A finished chat completion and how to deliver it. */
export interface CompletionOutcome {
  completion: ChatCompletionResponse;
  stream: boolean;
  includeUsage: boolean;
}

/** `GET /health` of the proxy: its sessions, its store, the rollout pause and its settings. */
export interface ProxyHealth {
  status: 'ok';
  active_sessions: number;
  store: TrajectoryStats;
  rollout_pause: RolloutPauseState;
  config: {
    sglang_router_url: ProxyConfig['sglangRouterUrl'];
    token_build_mode: ProxyConfig['tokenBuildMode'];
    token_build_model: ProxyConfig['tokenBuildModel'];
    record_token_versions: ProxyConfig['recordTokenVersions'];
    mask_nonlast_version_tokens: ProxyConfig['maskNonlastVersionTokens'];
    max_output_tokens: ProxyConfig['maxOutputTokens'];
    rollout_temperature: ProxyConfig['rolloutTemperature'];
    context_window: ProxyConfig['contextWindow'];
    dynamic_max_tokens: ProxyConfig['dynamicMaxTokens'];
    use_rollout_routing_replay: ProxyConfig['useRolloutRoutingReplay'];
    partial_rollout: ProxyConfig['partialRollout'];
    max_partial_rollout_preempts: ProxyConfig['maxPartialRolloutPreempts'];
    stream_heartbeat_interval_seconds: ProxyConfig['streamHeartbeatIntervalSeconds'];
  };
}

function isRawChatBody(value: unknown): value is RawChatBody {
  return (
    typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    Array.isArray((value as { messages?: unknown }).messages)
  );
}

function parseBody<TSchema extends z.ZodType>(
  schema: TSchema,
  body: unknown,
  what: string,
): z.output<TSchema> {
  const result = safeParseWire(schema, body, what);
  if (!result.success) throw detailError(400, result.error.message);
  return result.data;
}

// Ids become headers of the engine call: one that cannot be is the client's 400, naming its field.
function checkIdentifiers(candidates: ReadonlyArray<[string, string | null | undefined]>): void {
  for (const [field, value] of candidates) {
    if (value === null || value === undefined) continue;
    const problem = identifierProblem(value);
    if (problem !== null) throw detailError(400, `${field} ${problem}`);
  }
}

// JSON values compared exactly as sent: the same keys in the same order and the same scalars. Equal
// inputs validate to equal outputs, so a message equal to one validated before needs no validation.
function sameJson(left: unknown, right: unknown): boolean {
  if (left === right) return true;
  if (typeof left !== 'object' || typeof right !== 'object' || left === null || right === null) return false;
  if (Array.isArray(left)) {
    if (!Array.isArray(right) || left.length !== right.length) return false;
    for (let index = 0; index < left.length; index++) if (!sameJson(left[index], right[index])) return false;
    return true;
  }
  if (Array.isArray(right)) return false;
  const leftKeys = Object.keys(left);
  const rightKeys = Object.keys(right);
  if (leftKeys.length !== rightKeys.length) return false;
  for (let index = 0; index < leftKeys.length; index++) {
    const key = leftKeys[index]!;
    if (key !== rightKeys[index]) return false;
    if (!sameJson((left as Record<string, unknown>)[key], (right as Record<string, unknown>)[key]))
      return false;
  }
  return true;
}

function header(headers: IncomingHttpHeaders, name: string): string | null {
  const value = headers[name];
  const text = Array.isArray(value) ? value[0] : value;
  return text === undefined || text.trim() === '' ? null : text.trim();
}

function chatCompletionId(): string {
  return `chatcmpl-${randomUUID().replaceAll('-', '').slice(0, 12)}`;
}

/**
 * The proxy's behaviour behind HTTP: sessions, the chat pipeline, finalize, read, discard, pause and
 * resume. {@link createProxyServer} puts it on a socket.
 */
export class ProxyService {
  readonly config: ProxyConfig;
  readonly engine: EngineClient;
  readonly controller: GenerationController;
  readonly store: TrajectoryStore;
  readonly tokenizer: PromptTokenizer;
  readonly #parser: OutputParser;
  readonly #sessions = new Map<string, Session>();
  readonly #finalized = new Map<string, { at: number; result: FinalizeResult }>();
  readonly #planOptions: PlanOptions;
  /** Null without hooks, so the chat path skips every hook check. */
  readonly #hooks: ToolCallHookRunner | null;
  #sweeper: NodeJS.Timeout | null = null;
  #inFlight = 0;

  private constructor(
    config: ProxyConfig,
    tokenizer: PromptTokenizer,
    store: TrajectoryStore,
    hooks: ToolCallHookRunner | null,
  ) {
    this.config = config;
    this.#hooks = hooks;
    this.tokenizer = tokenizer;
    this.store = store;
    this.engine = new EngineClient({
      routerUrl: config.sglangRouterUrl,
      generateTimeoutSeconds: config.engineRequestTimeoutSeconds,
    });
    this.controller = new GenerationController({
      engine: this.engine,
      partialRollout: config.partialRollout,
      readinessTimeoutSeconds: config.resumeReadinessTimeoutSeconds,
    });
    this.#parser = new OutputParser({
      engine: this.engine,
      toolCallType: config.modelToolCallType,
      toolCallBackend: config.toolCallParseBackend,
      reasoningType: config.modelReasoningType,
      reasoningBackend: config.reasoningParseBackend,
    });
    this.#planOptions = {
      tokenizer,
      mode: config.tokenBuildMode,
      routedExpertsDtype: config.routedExpertsDtype,
    };
    const sweepMs = Math.max(50, Math.min(60_000, (config.sessionTimeoutSeconds * 1000) / 4));
    this.#sweeper = setInterval(() => this.expireIdle(), sweepMs);
    this.#sweeper.unref();
  }

  /**
   * Imports the configured tool-call hooks, opens the trajectory store and builds the service.
   *
   * @throws DressageError `invalid_argument` when a hook cannot be loaded or is invalid.
   */
  static async create(
    config: ProxyConfig,
    tokenizer: PromptTokenizer,
    options: ProxyServiceOptions = {},
  ): Promise<ProxyService> {
    const hooks = [...(await loadToolCallHooks(config.toolCallHooks)), ...(options.toolCallHooks ?? [])];
    const runner =
      hooks.length > 0 ? new ToolCallHookRunner(hooks, config.toolCallHookBeforeTimeoutSeconds) : null;
    const store = await TrajectoryStore.open({
      directory: config.storeDirectory,
      memoryLimitBytes: config.storeMemoryLimitBytes,
      fsync: config.storeFsync,
      runId: config.runId,
      adopt: config.adoptStore,
    });
    return new ProxyService(config, tokenizer, store, runner);
  }

  /** The tool-call hooks the service dispatches, in configured order. */
  get toolCallHooks(): readonly ToolCallHook[] {
    return this.#hooks?.hooks ?? [];
  }

  /** Number of open sessions. */
  get activeSessions(): number {
    return this.#sessions.size;
  }

  /** The open session with this id, if any (inspection: benchmarks, debugging). */
  session(id: string): Session | undefined {
    return this.#sessions.get(id);
  }

  /** Drops idle sessions and forgets old finalized ids (`--session-timeout`). */
  expireIdle(now = Date.now()): void {
    const timeoutMs = this.config.sessionTimeoutSeconds * 1000;
    for (const [id, session] of this.#sessions) {
      if (!session.lock.busy && now - session.lastActivity >= timeoutMs) {
        session.closed = true;
        this.#sessions.delete(id);
      }
    }
    for (const [id, entry] of this.#finalized) if (now - entry.at >= timeoutMs) this.#finalized.delete(id);
  }

  /** `POST /v1/chat/completions` up to the finished completion (streaming is the server's job). */
  async chatCompletion(
    rawBody: unknown,
    headers: IncomingHttpHeaders,
    signal: AbortSignal,
  ): Promise<CompletionOutcome> {
    if (this.controller.shuttingDown) throw detailError(503, { error: 'proxy_shutting_down' });
    const body = this.#parseChatBody(rawBody, headers);
    return this.runChatCompletion(
      // #parseChatBody accepted it: an object with a `messages` array.
      {
        rawMessages: (rawBody as RawChatBody).messages,
        rawTools: (rawBody as RawChatBody).tools,
        body,
        layout: null,
      },
      headers,
      signal,
    );
  }

  /**
   * Parses and validates a chat request body given as bytes. When it repeats the session's previous
   * body up to the end of that body's messages (an agent resending its history), only the bytes
   * after them are parsed and validated; the result is the same as parsing everything.
   *
   * @throws ProxyHttpError 400 on malformed JSON or an invalid request, 503 while shutting down.
   */
  parseChatRequest(bytes: Buffer, headers: IncomingHttpHeaders): ParsedChatRequest {
    const key = header(headers, 'x-session-id') ?? header(headers, 'x-smg-routing-key');
    const cache = key === null ? null : (this.#sessions.get(key)?.requestCache ?? null);
    const continued = cache?.layout ? continueBody(cache.layout, bytes) : null;
    if (continued !== null && cache !== null) {
      if (this.controller.shuttingDown) throw detailError(503, { error: 'proxy_shutting_down' });
      const { layout, repeated, appended } = continued;
      const members: RawBodyMembers = { ...layout.before, ...layout.after };
      // The same tools: the same bytes after the messages (or before them, with none after), or
      // the same JSON. Tools dropped from the request are a change too.
      const sameTools = continued.sameAfter || sameJson(members.tools, cache.rawTools);
      if (appended.length > 0) {
        const result = chatCompletionRequestSchema.safeParse({
          ...layout.before,
          messages: appended,
          ...layout.after,
          tools: sameTools ? null : members.tools,
        });
        if (result.success) {
          const body = result.data;
          body.messages = [...cache.messages.slice(0, repeated), ...body.messages];
          if (sameTools) body.tools = cache.tools;
          return { rawMessages: null, rawTools: members.tools, body, layout };
        }
      }
      // Nothing appended (or the new part is invalid): validate everything, as a fresh body would be.
      const raw = parseJson(bytes);
      return {
        rawMessages: null,
        rawTools: members.tools,
        body: parseBody(chatCompletionRequestSchema, raw, 'chat completion request'),
        layout,
      };
    }
    const raw = parseJson(bytes);
    if (this.controller.shuttingDown) throw detailError(503, { error: 'proxy_shutting_down' });
    const body = this.#parseChatBody(raw, headers);
    const layout = layoutOf(bytes);
    // With a layout, the next body is compared byte for byte: the parsed messages need not be kept.
    return {
      rawMessages: layout === null ? (raw as RawChatBody).messages : null,
      rawTools: (raw as RawChatBody).tools,
      body,
      layout,
    };
  }

  /** Runs a request from {@link parseChatRequest} up to the finished completion. */
  async runChatCompletion(
    request: ParsedChatRequest,
    headers: IncomingHttpHeaders,
    signal: AbortSignal,
  ): Promise<CompletionOutcome> {
    if (this.controller.shuttingDown) throw detailError(503, { error: 'proxy_shutting_down' });
    const { body } = request;
    checkIdentifiers([
      ['x-session-id', header(headers, 'x-session-id')],
      ['x-smg-routing-key', header(headers, 'x-smg-routing-key')],
      ['session_id', body.session_id],
      ['x-instance-id', header(headers, 'x-instance-id')],
      ['instance_id', body.instance_id],
      ['x-turn-id', header(headers, 'x-turn-id')],
      ['turn_id', body.turn_id],
    ]);
    const sessionId =
      header(headers, 'x-session-id') ??
      header(headers, 'x-smg-routing-key') ??
      body.session_id ??
      randomUUID();
    const instanceId = header(headers, 'x-instance-id') ?? body.instance_id ?? null;
    const explicitTurn = header(headers, 'x-turn-id') ?? body.turn_id ?? null;
    const expectedVersion = header(headers, 'x-dressage-expected-version');
    const sandboxId = header(headers, 'x-dressage-sandbox-id') ?? body.sandbox_id ?? null;
    if (this.#finalized.has(sessionId))
      throw detailError(409, `Session ${sessionId} has already been finalized.`);
    let session = this.#sessions.get(sessionId);
    if (!session) {
      session = new Session(sessionId, instanceId ?? randomUUID());
      this.#sessions.set(sessionId, session);
    } else if (instanceId !== null) {
      session.instanceId = instanceId;
    }
    session.requestCache = {
      rawMessages: request.rawMessages,
      messages: body.messages as ChatMessage[],
      rawTools: request.rawTools,
      tools: body.tools as Tool[] | null | undefined,
      layout: request.layout,
    };
    const current = session;
    this.#inFlight += 1;
    try {
      return await current.lock.run(() =>
        this.#runCompletion(current, body, explicitTurn, expectedVersion, sandboxId, signal),
      );
    } finally {
      this.#inFlight -= 1;
      current.lastActivity = Date.now();
    }
  }

  /**
   * Validates a chat body. Agents resend the whole history every turn, so the messages (and tools)
   * equal to the session's previous request reuse its validated objects and only the new tail goes
   * through the schema; any failure falls back to validating everything, so errors are unchanged.
   */
  #parseChatBody(rawBody: unknown, headers: IncomingHttpHeaders): ChatCompletionRequest {
    const raw = isRawChatBody(rawBody) ? rawBody : null;
    const rawMessages = raw?.messages;
    if (raw !== null && rawMessages !== undefined) {
      const key =
        header(headers, 'x-session-id') ??
        header(headers, 'x-smg-routing-key') ??
        (typeof raw.session_id === 'string' ? raw.session_id : null);
      const cache = key === null ? null : (this.#sessions.get(key)?.requestCache ?? null);
      const cachedMessages = cache?.rawMessages ?? null;
      if (cache !== null && cachedMessages !== null) {
        const limit = Math.min(rawMessages.length, cachedMessages.length);
        let shared = 0;
        while (shared < limit && sameJson(rawMessages[shared], cachedMessages[shared])) shared++;
        if (shared > 0 && shared < rawMessages.length) {
          const sameTools = sameJson(raw.tools, cache.rawTools);
          const partial = {
            ...raw,
            messages: rawMessages.slice(shared),
            tools: sameTools ? null : raw.tools,
          };
          const result = chatCompletionRequestSchema.safeParse(partial);
          if (result.success) {
            const body = result.data;
            body.messages = [...cache.messages.slice(0, shared), ...body.messages];
            if (sameTools) body.tools = cache.tools;
            return body;
          }
        }
      }
    }
    return parseBody(chatCompletionRequestSchema, rawBody, 'chat completion request');
  }

  async #runCompletion(
    session: Session,
    body: ChatCompletionRequest,
    explicitTurn: string | null,
    expectedVersion: string | null,
    sandboxId: string | null,
    signal: AbortSignal,
  ): Promise<CompletionOutcome> {
    this.#checkSessionTakesStep(session);
    session.lastActivity = Date.now();
    const turnId = session.resolveTurn(explicitTurn);
    const partial = this.config.partialRollout;
    const messages = body.messages as ChatMessage[];
    const tools = (body.tools ?? null) as Tool[] | null;
    // Tool-call hooks need the sandbox to act on; without its id they are not dispatched (§1.10).
    const hooks = sandboxId === null ? null : this.#hooks;
    const hookSink: HookMetadataSink = { metadata: null };
    if (hooks?.has('after') && messages.at(-1)?.role === 'tool') {
      let first = messages.length - 1;
      while (first > 0 && messages[first - 1]!.role === 'tool') first--;
      const toolMessages = messages.slice(first) as ToolMessage[];
      await dispatchHooks(hooks, session, hookSink, {
        stage: 'after',
        sandboxId: sandboxId!,
        turnId,
        toolCalls: null,
        toolMessages,
        signal,
      });
    }
    const plan = planStep(session, turnId, messages, tools, this.#planOptions);
    const promptTokens = plan.promptIds.length;
    const maxNewTokens = this.#maxNewTokens(body, promptTokens, session, turnId);
    const limit = this.config.maxStepsPerSession;
    if (limit > 0 && session.steps.length >= limit) {
      throw detailError(
        400,
        `Session ${session.id} reached proxy step limit (${limit}). Refusing further inference.`,
      );
    }
    if (!partial && session.realVersions.length > 0) {
      const fresh = [expectedVersion, this.controller.currentVersion].filter(
        (version): version is string => isRealVersion(version) && !session.realVersions.includes(version),
      );
      if (fresh.length > 0) throw this.#versionChanged(session, [...new Set(fresh)]);
    }
    const samplingParams: SglangSamplingParams = {
      temperature: body.temperature ?? this.config.rolloutTemperature,
      top_p: body.top_p ?? 1.0,
      top_k: body.top_k ?? -1,
      skip_special_tokens: false,
      no_stop_trim: true,
      spaces_between_special_tokens: false,
    };
    if (maxNewTokens !== null) samplingParams.max_new_tokens = maxNewTokens;
    const requestVersion = this.controller.currentVersion;
    const output = await this.controller.generate({
      sessionId: session.id,
      instanceId: session.instanceId,
      turnId,
      promptIds: plan.promptIds,
      samplingParams,
      maxNewTokens,
      firstLogprobStartLen: this.config.tokenBuildMode === 'tito' ? -1 : 0,
      returnRoutedExperts: this.config.useRolloutRoutingReplay,
      expectedVersion,
      boundEpoch: !partial && session.steps.length > 0 ? session.boundEpoch : null,
      encodeText: (text) => this.tokenizer.encodeText(text),
      signal,
    });
    this.#checkVersionsAfter(session, output);
    const contextWindow = this.config.contextWindow;
    if (contextWindow !== null && promptTokens + output.ids.length > contextWindow)
      this.#refuseOverflow(session, plan, output, contextWindow, {
        requestVersion,
        hookMetadata: hookSink.metadata,
        maxNewTokens,
        turnId,
      });
    const parsed = this.#parser.parseLocally(output.text) ?? (await this.#parser.parse(output.text, tools));
    const finishReason =
      parsed.toolCalls.length > 0 ? 'tool_calls' : output.finishReason === 'length' ? 'length' : 'stop';
    if (hooks?.has('before') && parsed.toolCalls.length > 0) {
      // A required failure answers 502 before the step is recorded (as the reference does): earlier
      // steps stay, the session stays open, and the agent's retry generates this step again.
      const toolCalls = parsed.toolCalls;
      await dispatchHooks(hooks, session, hookSink, {
        stage: 'before',
        sandboxId: sandboxId!,
        turnId,
        toolCalls,
        toolMessages: null,
        signal,
      });
    }
    const message = this.#record(
      session,
      plan,
      output,
      parsed,
      finishReason,
      requestVersion,
      hookSink.metadata,
    );
    const completion = completionOf(body, message, finishReason, promptTokens, output.ids.length);
    return {
      completion,
      stream: body.stream === true,
      includeUsage: body.stream_options?.include_usage !== false,
    };
  }

  // The engine ignored the context window's clamp: its tokens are dropped, an empty step recorded,
  // and the overflow reported (413). Called only on an overflow: the hot path allocates nothing here.
  #refuseOverflow(
    session: Session,
    plan: StepPlan,
    output: GenerationOutput,
    contextWindow: number,
    step: {
      requestVersion: string | null;
      hookMetadata: Record<string, unknown> | null;
      maxNewTokens: number | null;
      turnId: string;
    },
  ): never {
    const promptTokens = plan.promptIds.length;
    // The engine ignored the clamp: drop its tokens, record an empty step, report the overflow.
    const empty: GenerationOutput = {
      ...output,
      ids: new Int32Array(0),
      logprobs: new Float32Array(0),
      versionRuns: [],
    };
    this.#record(
      session,
      plan,
      empty,
      { content: '', reasoning: null, toolCalls: [] },
      'length',
      step.requestVersion,
      step.hookMetadata,
    );
    throw contextOverflowError({
      phase: 'input_output',
      context_window: contextWindow,
      input_tokens: promptTokens,
      output_tokens: output.ids.length,
      total_tokens: promptTokens + output.ids.length,
      max_tokens: step.maxNewTokens,
      session_id: session.id,
      turn_id: step.turnId,
      last_proxy_step_recorded: true,
    });
  }

  // A session takes a step while open and, for a non-partial trajectory, while no resume has moved
  // the rollout epoch since it started.
  #checkSessionTakesStep(session: Session): void {
    if (session.closed) {
      throw detailError(
        409,
        this.#finalized.has(session.id)
          ? `Session ${session.id} has already been finalized.`
          : `Session ${session.id} is no longer active.`,
      );
    }
    if (
      !this.config.partialRollout &&
      session.steps.length > 0 &&
      session.boundEpoch !== null &&
      session.boundEpoch !== this.controller.rolloutEpoch
    ) {
      throw detailError(502, {
        error: 'trajectory_version_changed',
        message: 'The rollout epoch changed since this non-partial trajectory started.',
        session_epoch: session.boundEpoch,
        current_epoch: this.controller.rolloutEpoch,
        session_id: session.id,
        instance_id: session.instanceId,
      });
    }
  }

  #record(
    session: Session,
    plan: StepPlan,
    output: GenerationOutput,
    parsed: ParsedOutput,
    finishReason: string,
    requestVersion: string | null,
    toolCallHookMetadata: Record<string, unknown> | null,
  ): ChatCompletionResponse['choices'][number]['message'] {
    const message: ChatCompletionResponse['choices'][number]['message'] = {
      role: 'assistant',
      content: parsed.content ?? (parsed.toolCalls.length > 0 ? null : ''),
    };
    if (parsed.reasoning) message.reasoning_content = parsed.reasoning;
    if (parsed.toolCalls.length > 0) message.tool_calls = parsed.toolCalls;
    if (session.steps.length === 0) session.boundEpoch = this.controller.rolloutEpoch;
    commitStep(
      session,
      plan,
      {
        ids: output.ids,
        logprobs: output.logprobs,
        versionRuns: output.versionRuns,
        logprobsInvalid: output.logprobsInvalid,
        finishReason,
        assistantMessage: message as ChatMessage,
        requestVersion,
        routedExperts: output.routedExperts,
        toolCallHookMetadata,
      },
      this.#planOptions,
    );
    return message;
  }

  #maxNewTokens(
    body: ChatCompletionRequest,
    promptTokens: number,
    session: Session,
    turnId: string,
  ): number | null {
    const requested = body.max_tokens ?? null;
    const configured = this.config.maxOutputTokens;
    const cap =
      requested !== null && configured !== null ? Math.min(requested, configured) : (requested ?? configured);
    const contextWindow = this.config.contextWindow;
    if (contextWindow === null) return cap;
    const overflow = (phase: 'input' | 'input_output') =>
      contextOverflowError({
        phase,
        context_window: contextWindow,
        input_tokens: promptTokens,
        output_tokens: 0,
        total_tokens: promptTokens,
        max_tokens: cap,
        session_id: session.id,
        turn_id: turnId,
        last_proxy_step_recorded: false,
      });
    if (promptTokens >= contextWindow) throw overflow('input');
    if (!this.config.dynamicMaxTokens) return cap;
    const remaining = contextWindow - promptTokens - 1;
    if (remaining < 1) throw overflow('input_output');
    return cap === null ? remaining : Math.min(cap, remaining);
  }

  #versionChanged(session: Session, fresh: string[]) {
    return detailError(502, {
      error: 'trajectory_version_changed',
      message: 'This non-partial trajectory would mix weight versions.',
      previous_versions: [...session.realVersions],
      new_versions: fresh,
      session_id: session.id,
      instance_id: session.instanceId,
    });
  }

  #checkVersionsAfter(session: Session, output: GenerationOutput): void {
    const observed: string[] = [];
    for (const run of output.versionRuns)
      if (isRealVersion(run.version) && !observed.includes(run.version)) observed.push(run.version);
    if (!this.config.partialRollout) {
      if (session.realVersions.length === 0) return;
      const fresh = observed.filter((version) => !session.realVersions.includes(version));
      if (fresh.length > 0) throw this.#versionChanged(session, fresh);
      return;
    }
    const limit = this.config.maxPartialRolloutPreempts;
    if (limit === null) return;
    const versions = [...session.realVersions];
    for (const version of observed) if (!versions.includes(version)) versions.push(version);
    const switches = versions.length - 1;
    if (switches > limit) {
      throw detailError(502, {
        error: 'partial_rollout_staleness_exceeded',
        message: `The trajectory spans ${versions.length} weight versions; at most ${limit + 1} are allowed.`,
        versions,
        version_span: versions.length,
        version_switches: switches,
        max_preempts: limit,
        max_version_span: limit + 1,
        session_id: session.id,
        instance_id: session.instanceId,
      });
    }
  }

  /** `POST /session/finalize`. */
  async finalize(rawBody: unknown): Promise<FinalizeResult> {
    const body = parseBody(finalizeRequestSchema, rawBody, 'finalize request');
    const cached = this.#finalized.get(body.session_id);
    if (cached) return cached.result;
    const session = this.#sessions.get(body.session_id);
    if (!session) throw detailError(404, `Session ${body.session_id} not found`);
    return session.lock.run(async () => {
      const again = this.#finalized.get(session.id);
      if (again) return again.result;
      if (session.closed) throw detailError(404, `Session ${session.id} not found`);
      if (session.steps.length === 0) throw detailError(400, 'Session has no turns');
      if (body.instance_id) session.instanceId = body.instance_id;
      const { trajectory, result } = buildTrajectory(session, this.config, body.label);
      await this.store.put(trajectory);
      // A later session reusing this id starts at step 0 again: its keys must not match these.
      const purged = session.toolCallHookResults?.size ?? 0;
      session.toolCallHookResults = null;
      if (purged > 0) result.tool_call_hook_keys_purged = purged;
      session.closed = true;
      this.#sessions.delete(session.id);
      this.#finalized.set(session.id, { at: Date.now(), result });
      return result;
    });
  }

  /**
   * `POST /session/discard`: idempotent. `session_removed` is true when an active or finalized
   * session was forgotten; `segments_removed` counts the stored records dropped with it.
   */
  async discard(rawBody: unknown): Promise<DiscardResponse> {
    const body = parseBody(discardRequestSchema, rawBody, 'discard request');
    const session = this.#sessions.get(body.session_id);
    let sessionRemoved = false;
    let hookKeysPurged = 0;
    if (session) {
      await session.lock.run(async () => {
        session.closed = true;
        hookKeysPurged = session.toolCallHookResults?.size ?? 0;
        session.toolCallHookResults = null;
      });
      sessionRemoved = this.#sessions.delete(body.session_id);
    }
    // A finalized session is state too: forgetting its cached result removes it.
    if (this.#finalized.delete(body.session_id)) sessionRemoved = true;
    const segmentsRemoved = await this.store.discard(body.session_id);
    return {
      success: true,
      session_id: body.session_id,
      session_removed: sessionRemoved,
      segments_removed: segmentsRemoved,
      tool_call_hook_keys_purged: hookKeysPurged,
    };
  }

  /** `POST /trajectory/read`. */
  async read(rawBody: unknown): Promise<TrajectoryReadResponse> {
    const body = parseBody(readRequestSchema, rawBody ?? {}, 'trajectory read request');
    const id = body.trajectory_id ?? body.session_id ?? null;
    if (id !== null) {
      const { data, drained } = await this.store.read(id, {
        instanceId: body.instance_id ?? null,
        view: body.segment_view ?? null,
        drain: body.drain === true,
      });
      return { success: data.length > 0, mode: 'trajectory', data, meta_info: this.stats(), drained };
    }
    const data = await this.store.readBatch({
      minGroupSize: this.config.minGroupSize,
      groupTimeoutMs: this.config.groupTimeoutSeconds * 1000,
      maxGroups: body.max_groups ?? null,
    });
    return { success: data.length > 0, mode: 'batch', data, meta_info: this.stats() };
  }

  /** `GET /trajectory/stats`. */
  stats(): TrajectoryStats {
    return { ...this.store.stats(this.config.minGroupSize, this.config.groupTimeoutSeconds * 1000) };
  }

  /** `POST /v1/rollout/pause`. */
  async pause(rawBody: unknown): Promise<RolloutPauseResponse> {
    const body = parseBody(rolloutPauseRequestSchema, rawBody ?? {}, 'pause request');
    return this.controller.pause({
      session_id: body.session_id ?? null,
      instance_id: body.instance_id ?? null,
      reason: body.reason ?? 'weight_update',
      mode: body.mode ?? 'preempt',
      timeout_seconds: body.timeout_seconds ?? null,
    });
  }

  /** `POST /v1/rollout/resume`. */
  async resume(rawBody: unknown): Promise<RolloutResumeResponse> {
    const body = parseBody(rolloutResumeRequestSchema, rawBody ?? {}, 'resume request');
    return this.controller.resume({
      version: body.version === null || body.version === undefined ? null : String(body.version),
      reason: body.reason ?? null,
    });
  }

  /** `GET /integration/capabilities`: probes the workers' weight versions. */
  async capabilities(): Promise<CapabilitiesResponse> {
    const controller = this.controller;
    const cached = controller.currentVersion;
    let source: CapabilitiesResponse['weight_version_source'] = 'unavailable';
    let consistent = true;
    let workerCount = 0;
    let current = cached;
    if (controller.paused || controller.activeCount > 0) {
      source = 'controller_busy';
    } else {
      const versions = await this.engine.workerWeightVersions();
      workerCount = versions.length;
      const real = versions.filter((version): version is string => isRealVersion(version));
      consistent = new Set(real).size <= 1 && real.length === versions.length;
      if (real.length > 0 && consistent) {
        source = 'worker_snapshot';
        current = real[0]!;
        // Idle and running: adopt the engines' version; a change opens a new epoch.
        if (!controller.paused && controller.activeCount === 0 && current !== cached) {
          if (isRealVersion(cached)) controller.rolloutEpoch += 1;
          controller.currentVersion = current;
        }
      } else if (isRealVersion(cached)) {
        source = 'generation_observation';
      }
    }
    return {
      schema_version: 'dressage.proxy.integration/v1',
      token_build_mode: this.config.tokenBuildMode,
      token_build_model: this.config.tokenBuildModel,
      tokenizer_id: this.tokenizer.tokenizerId,
      chat_template_fingerprint: this.tokenizer.chatTemplateFingerprint,
      record_token_versions: this.config.recordTokenVersions,
      mask_nonlast_version_tokens: this.config.maskNonlastVersionTokens,
      max_output_tokens: this.config.maxOutputTokens,
      partial_rollout: this.config.partialRollout,
      max_partial_rollout_preempts: this.config.maxPartialRolloutPreempts,
      current_weight_version: current,
      cached_weight_version: cached,
      weight_version_authoritative: source === 'worker_snapshot',
      weight_versions_consistent: consistent,
      weight_version_source: source,
      weight_version_worker_count: workerCount,
      supports_expected_version: true,
    };
  }

  /** `GET /v1/models`: the router's list, or the fixed fallback. */
  async models(): Promise<unknown> {
    try {
      const models = await this.engine.models();
      if (models && typeof models === 'object') return models;
    } catch {
      // Fall through to the fallback the reference answers with.
    }
    return { object: 'list', data: [{ id: 'proxy-model', object: 'model', owned_by: 'proxy' }] };
  }

  /** `GET /health`. */
  health(): ProxyHealth {
    const config = this.config;
    return {
      status: 'ok',
      active_sessions: this.#sessions.size,
      store: this.stats(),
      rollout_pause: this.controller.state(),
      config: {
        sglang_router_url: config.sglangRouterUrl,
        token_build_mode: config.tokenBuildMode,
        token_build_model: config.tokenBuildModel,
        record_token_versions: config.recordTokenVersions,
        mask_nonlast_version_tokens: config.maskNonlastVersionTokens,
        max_output_tokens: config.maxOutputTokens,
        rollout_temperature: config.rolloutTemperature,
        context_window: config.contextWindow,
        dynamic_max_tokens: config.dynamicMaxTokens,
        use_rollout_routing_replay: config.useRolloutRoutingReplay,
        partial_rollout: config.partialRollout,
        max_partial_rollout_preempts: config.maxPartialRolloutPreempts,
        stream_heartbeat_interval_seconds: config.streamHeartbeatIntervalSeconds,
      },
    };
  }

  /** Refuses new work, waits for running calls, closes the store and the engine pool. */
  async close(): Promise<void> {
    this.controller.shutdown();
    if (this.#sweeper) clearInterval(this.#sweeper);
    this.#sweeper = null;
    const deadline = Date.now() + 10_000;
    while (this.#inFlight > 0 && Date.now() < deadline) await sleep(10);
    await this.store.close();
    await this.engine.close();
  }
}

// Runs the tool-call hooks of one stage for the session's next step; their metadata lands in `sink`.
function dispatchHooks(
  hooks: ToolCallHookRunner,
  session: Session,
  sink: HookMetadataSink,
  call: {
    stage: 'before' | 'after';
    sandboxId: string;
    turnId: string;
    toolCalls: ExtractedToolCall[] | null;
    toolMessages: ToolMessage[] | null;
    signal: AbortSignal;
  },
): Promise<void> {
  session.toolCallHookResults ??= new Map();
  return hooks.dispatch(
    { ...call, sessionId: session.id, instanceId: session.instanceId, stepIndex: session.steps.length },
    session.toolCallHookResults,
    sink,
  );
}

// The answer of one chat completion: the recorded message and the token counts.
function completionOf(
  body: ChatCompletionRequest,
  message: ChatCompletionResponse['choices'][number]['message'],
  finishReason: ChatCompletionResponse['choices'][number]['finish_reason'],
  promptTokens: number,
  completionTokens: number,
): ChatCompletionResponse {
  return {
    id: chatCompletionId(),
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: body.model ?? 'proxy-model',
    choices: [{ index: 0, message, finish_reason: finishReason }],
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    },
  };
}
