import { randomBytes } from 'node:crypto';
import { expandSegmentsToSamples, markAbortedNoGrad } from '@dressage/multi-segment';
import {
  type ChatCompletionResponse,
  type ChatMessage,
  chatCompletionResponseSchema,
  DressageError,
  type Sample,
  type SglangSamplingParams,
  safeParseWire,
  type Tool,
} from '@dressage/protocol';
import type { SandboxLease, SandboxProvider } from '@dressage/sandbox';
import type { TrajectoryProxy } from './trajectory-proxy.js';
import { WhiteboxToolPaddock } from './whitebox-tools.js';

/**
 * A chat completion request of a whitebox agent: its messages and tools typed; any other OpenAI key
 * (`temperature`, `max_tokens`, `stop`, ...) passes to the proxy as it is.
 */
export interface WhiteboxChatRequest {
  messages: readonly ChatMessage[];
  tools?: readonly Tool[];
  model?: string;
  [key: string]: unknown;
}

/** What a whitebox agent run is given. */
export interface WhiteboxRunContext {
  /** `wb-<hex>`: send it as `X-Session-Id` on every model request (no turn ids: implicit mode). */
  sessionId: string;
  instanceId: string;
  /** The Dressage proxy base URL. */
  proxyUrl: string;
  /**
   * Posts a chat completion to the proxy under this session. The scheduler's sampling parameters
   * (`temperature`, `top_p`, `top_k`, `max_new_tokens` as `max_tokens`) fill keys the body leaves out.
   * Past `maxTurns` requests it sends nothing and throws a `resource_exhausted` error. The answer is
   * checked against the chat completion schema.
   */
  chat(body: WhiteboxChatRequest): Promise<ChatCompletionResponse>;
  /** Model requests a run may make (the generate function's `maxTurns`); null: no limit. */
  maxTurns: number | null;
  /** Aborted when the scheduler cancels the rollout; pending model calls are cancelled with it. */
  signal: AbortSignal;
  /** The scheduler's sampling parameters for this sample. */
  samplingParams: Readonly<SglangSamplingParams>;
  /** Written by the agent, merged into the metadata of every sample the run produces (e.g. for the reward). */
  metadata: Record<string, unknown>;
}

// OpenAI request keys filled from the scheduler's sampling parameters when the agent omits them.
function samplingDefaults(samplingParams: Readonly<SglangSamplingParams>): {
  temperature?: number;
  top_p?: number;
  top_k?: number;
  max_tokens?: unknown;
} {
  const { temperature, top_p, top_k } = samplingParams;
  const maxTokens = samplingParams.max_new_tokens ?? samplingParams.max_tokens;
  return {
    ...(temperature === undefined ? {} : { temperature }),
    ...(top_p === undefined ? {} : { top_p }),
    ...(top_k === undefined ? {} : { top_k }),
    ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }),
  };
}

/** Settings shared by every whitebox agent of a generate function. */
export interface WhiteboxGenerateOptions {
  proxy: TrajectoryProxy;
  proxyUrl: string;
  /** Required by {@link PaddockWhiteboxAgent}s: the sandbox provider (a command_only pool). */
  provider?: SandboxProvider;
  /** slime's `--max-tokens-per-gpu`: segments longer than `maxTokensPerGpu × contextParallelSize` are truncated. */
  maxTokensPerGpu?: number | null;
  /** slime's `--context-parallel-size` (the token cap's factor). Default 1. */
  contextParallelSize?: number | null;
  /** Mask trainable tokens of older weight versions ({@link expandSegmentsToSamples}). */
  maskNonlastVersionTokens?: boolean;
  /** Model requests per sample; `context.chat` refuses the next one. Unset or null: no limit. */
  maxTurns?: number | null;
  /** Routing replay (R3): decode each segment's routed experts to this model shape. */
  routingReplay?: { numLayers: number; moeRouterTopk: number } | null;
}

/**
 * A whitebox agent: your own loop calling the model through the Dressage proxy. Implement `run`,
 * returning the final response text.
 */
export abstract class WhiteboxAgent {
  constructor(protected readonly options: WhiteboxGenerateOptions) {}

  /** Rolls out one sample; the model calls go through `context.chat`. */
  abstract run(sample: Sample, context: WhiteboxRunContext): Promise<string | null>;

  /** Called once before `run` (acquire resources). */
  async setup(_sample: Sample, _context: WhiteboxRunContext): Promise<void> {}

  /** Called once after `run`, even when it failed. */
  async teardown(): Promise<void> {}
}

/** A whitebox agent with a sandbox: `this.tools` runs `shell.exec`, `file.read`, `file.write` in it. */
export abstract class PaddockWhiteboxAgent extends WhiteboxAgent {
  #lease: SandboxLease | null = null;
  #toolPaddock: WhiteboxToolPaddock | null = null;

  protected get tools(): WhiteboxToolPaddock {
    if (!this.#toolPaddock)
      throw new DressageError({
        code: 'failed_precondition',
        message: 'the sandbox is not ready: tools are available inside run()',
      });
    return this.#toolPaddock;
  }

  override async setup(_sample: Sample, context: WhiteboxRunContext): Promise<void> {
    const provider = this.options.provider;
    if (!provider)
      throw new DressageError({
        code: 'invalid_argument',
        message: 'PaddockWhiteboxAgent needs options.provider',
      });
    this.#lease = await provider.create({
      trajectoryId: context.sessionId,
      metadata: { paddock_mode: 'whitebox' },
    });
    this.#toolPaddock = new WhiteboxToolPaddock(provider, this.#lease);
  }

  override async teardown(): Promise<void> {
    if (this.#lease && this.options.provider)
      await this.options.provider.terminate(this.#lease).catch(() => undefined);
    this.#lease = null;
    this.#toolPaddock = null;
  }
}

// One chat completion through the proxy under the run's session; the answer checked by its schema.
async function postChat(
  base: string,
  body: object,
  ids: { sessionId: string; instanceId: string },
  signal: AbortSignal,
): Promise<ChatCompletionResponse> {
  const response = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-session-id': ids.sessionId,
      'x-instance-id': ids.instanceId,
    },
    body: JSON.stringify(body),
    signal,
  });
  const text = await response.text();
  if (!response.ok)
    throw new DressageError({
      code: 'unavailable',
      message: `model request failed with ${response.status}: ${text.slice(0, 300)}`,
      details: { status: response.status },
    });
  let answer: unknown;
  try {
    answer = JSON.parse(text);
  } catch {
    answer = text;
  }
  const checked = safeParseWire(chatCompletionResponseSchema, answer, 'chat completion from the proxy');
  if (!checked.success)
    throw new DressageError({ code: 'unavailable', message: checked.error.message, cause: checked.error });
  return checked.data;
}

/** A concrete whitebox agent class. */
export type WhiteboxAgentClass = new (options: WhiteboxGenerateOptions) => WhiteboxAgent;

/**
 * Builds the generate function of a whitebox agent class: one agent per sample, a `wb-<hex>`
 * session, then finalize, read and expand. A run that fails, or records nothing, yields a
 * no-gradient placeholder.
 */
export function makeGenerate(AgentClass: WhiteboxAgentClass, options: WhiteboxGenerateOptions) {
  return async (
    sample: Sample,
    samplingParams: Readonly<SglangSamplingParams> = {},
    generateContext: { signal?: AbortSignal } = {},
  ): Promise<Sample[]> => {
    const sessionId = `wb-${randomBytes(16).toString('hex')}`;
    const instanceId = String(sample.metadata.instance_id ?? sample.group_index ?? sessionId);
    const base = options.proxyUrl.replace(/\/+$/, '');
    const signal = generateContext.signal ?? new AbortController().signal;
    const defaults = samplingDefaults(samplingParams);
    const maxTurns = options.maxTurns ?? null;
    let turns = 0;
    const context: WhiteboxRunContext = {
      sessionId,
      instanceId,
      proxyUrl: base,
      signal,
      samplingParams,
      metadata: {},
      maxTurns,
      async chat(body) {
        if (maxTurns !== null && turns >= maxTurns) {
          throw new DressageError({
            code: 'resource_exhausted',
            message: `max_turns reached: this run has made its ${maxTurns} model requests`,
            details: { max_turns: maxTurns },
          });
        }
        turns += 1;
        return postChat(base, { ...defaults, ...body, stream: false }, { sessionId, instanceId }, signal);
      },
    };
    const agent = new AgentClass(options);
    // The failure's message and code stay on the placeholder, for the run's error log.
    const aborted = async (reason: string, code = 'aborted') => {
      await options.proxy.discardSession(sessionId).catch(() => undefined);
      return [
        markAbortedNoGrad(
          {
            ...sample,
            metadata: {
              ...sample.metadata,
              ...context.metadata,
              whitebox_error: reason,
              whitebox_error_code: code,
            },
          },
          { sessionId, instanceId },
        ),
      ];
    };
    const failure = (error: unknown) => {
      const reason = DressageError.from(error);
      return aborted(error instanceof Error ? error.message : String(error), reason.code);
    };
    let response: string | null;
    try {
      await agent.setup(sample, context);
      response = await agent.run(sample, context);
    } catch (error) {
      return failure(error);
    } finally {
      await agent.teardown();
    }
    try {
      await options.proxy.finalizeSession(sessionId, { instanceId, label: sample.label ?? undefined });
      const read = await options.proxy.readTrajectory({ trajectoryId: sessionId, drain: true });
      if (read.data.length === 0) return aborted('no segments recorded', 'failed_precondition');
      return expandSegmentsToSamples(
        {
          ...sample,
          session_id: sessionId,
          metadata: { ...sample.metadata, ...context.metadata, instance_id: instanceId },
        },
        read.data,
        {
          sessionId,
          instanceId,
          agentResponse: response,
          maxTokensPerGpu: options.maxTokensPerGpu ?? null,
          contextParallelSize: options.contextParallelSize ?? null,
          maskNonlastVersionTokens: options.maskNonlastVersionTokens ?? false,
          ...(options.routingReplay ? { useRolloutRoutingReplay: true, ...options.routingReplay } : {}),
        },
      );
    } catch (error) {
      return failure(error);
    }
  };
}
