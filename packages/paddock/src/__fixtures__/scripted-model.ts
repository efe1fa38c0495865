// A scripted OpenAI-compatible model server that also records trajectories the way the Dressage proxy
// does (finalize / read / discard, pause / resume), with a character-level "tokenizer". Tests use it
// where the real proxy and engine would be too slow or are not built yet.
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  type ChatCompletionRequest,
  type ChatMessage,
  chatCompletionRequestSchema,
  type SegmentRecord,
  safeParseWire,
} from '@dressage/protocol';

/** What the script answers for one chat completion request. */
export type ScriptReply =
  | { content: string; tool_calls?: { name: string; arguments: object }[]; reasoning?: string }
  | { status: number; body: object }
  | { streamError: object };

/** Decides the reply from the request (parsed as the Dressage proxy parses it) and its place in the session. */
export type Script = (
  request: ChatCompletionRequest,
  context: { headers: IncomingHttpHeaders; step: number },
) => ScriptReply | Promise<ScriptReply>;

interface RecordedStep {
  messages: ChatMessage[];
  reply: ChatMessage;
  turnId: string | null;
}

/** One recorded request. */
export interface RecordedRequest {
  path: string;
  headers: IncomingHttpHeaders;
  body: ChatCompletionRequest;
}

// The keys of a control request (finalize, read, discard, pause) the server reads.
interface ControlBody {
  session_id?: unknown;
  trajectory_id?: unknown;
  drain?: unknown;
  [key: string]: unknown;
}

const encode = (text: string) => Array.from(text, (char) => char.codePointAt(0) as number);

function render(message: ChatMessage): string {
  const calls = Array.isArray(message.tool_calls) ? JSON.stringify(message.tool_calls) : '';
  const content =
    typeof message.content === 'string' ? message.content : JSON.stringify(message.content ?? '');
  return `<${String(message.role)}>${content}${calls}`;
}

/** Builds the segment of a session: full conversation tokens, mask 1 exactly on model output. */
function segmentOf(sessionId: string, instanceId: string, steps: RecordedStep[]): SegmentRecord {
  const tokens: number[] = [];
  const mask: (0 | 1)[] = [];
  let covered = 0;
  const last = steps.at(-1) as RecordedStep;
  const conversation = [...last.messages, last.reply];
  // Every assistant message in the final snapshot was produced by the model in some earlier step.
  for (const message of conversation) {
    const ids = encode(render(message));
    tokens.push(...ids);
    mask.push(...ids.map(() => (message.role === 'assistant' ? 1 : 0) as 0 | 1));
    covered += 1;
  }
  void covered;
  const trainable = mask.reduce<number>((sum, value) => sum + value, 0);
  return {
    uid: `${sessionId}-0`,
    session_id: sessionId,
    trajectory_id: sessionId,
    turn_id: last.turnId,
    instance_id: instanceId,
    segment_index: 0,
    segment_count: 1,
    messages: conversation,
    tools: null,
    tokens,
    full_logprobs: mask.map((value) => (value ? -0.1 : 0)),
    full_loss_mask: mask,
    aligned_response_length: trainable,
    finish_reason: 'stop',
    timestamp: Date.now() / 1000,
    extra_info: {
      segment_view: 'lineage',
      alignment_method: 'tito',
      token_build_mode: 'tito',
      context_token_count: tokens.length - trainable,
      context_delta_token_count: tokens.length - trainable,
      output_token_count: trainable,
      num_steps: steps.length,
      num_turns: 1,
      turn_ids: last.turnId === null ? [] : [last.turnId],
      lineage_id: `${sessionId}-lineage`,
      lineage_index: 0,
      branch_from_step_id: null,
      step_ids: steps.map((_, index) => `${sessionId}-step-${index}`),
      timestamp: String(Date.now() / 1000),
      history_rewritten: false,
      segment_reason: 'initial',
      segment_reasons: ['initial'],
      trajectory_num_segments: 1,
      finalization_complete: true,
      finalization_id: `${sessionId}-finalization`,
    },
  };
}

const storeStats = { total_items: 0, total_instances: 0, ready_instances: 0 };

/** The scripted model server. */
export class ScriptedModelServer {
  readonly requests: RecordedRequest[] = [];
  readonly sessions = new Map<string, { instanceId: string; steps: RecordedStep[]; finalized: boolean }>();
  readonly controlCalls: { path: string; body: ControlBody }[] = [];
  #server: Server | null = null;
  url = '';

  readonly #script: Script;

  constructor(script: Script) {
    this.#script = script;
  }

  async start(): Promise<string> {
    this.#server = createServer((request, response) => void this.#handle(request, response));
    await new Promise<void>((resolve) => this.#server?.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this.url;
  }

  async #handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body = (text === '' ? {} : JSON.parse(text)) as ControlBody;
    const path = (request.url ?? '/').split('?')[0] ?? '/';
    const send = (status: number, payload: unknown) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(payload));
    };
    if (path.endsWith('/chat/completions')) {
      // As the Dressage proxy does: a request its schema refuses is a 400 naming the field.
      const parsed = safeParseWire(chatCompletionRequestSchema, body, 'chat completion request');
      if (!parsed.success) return send(400, { detail: parsed.error.message });
      return this.#chatCompletion(path, request, response, parsed.data);
    }
    if (path.endsWith('/rollout/pause') || path.endsWith('/rollout/resume')) {
      this.controlCalls.push({ path, body });
      return send(200, { success: true });
    }
    if (path === '/session/finalize') return send(...this.#finalize(body));
    if (path === '/trajectory/read') return send(...this.#readTrajectory(body));
    if (path === '/session/discard') {
      const removed = this.sessions.delete(String(body.session_id));
      return send(200, {
        success: true,
        session_id: body.session_id,
        session_removed: removed,
        segments_removed: 0,
        tool_call_hook_keys_purged: 0,
      });
    }
    if (path === '/health') return send(200, { status: 'ok' });
    send(404, { detail: 'Not Found' });
  }

  // One step of the session: the script's reply, recorded, as a completion or an SSE stream.
  async #chatCompletion(
    path: string,
    request: IncomingMessage,
    response: ServerResponse,
    body: ChatCompletionRequest,
  ): Promise<void> {
    this.requests.push({ path, headers: request.headers, body });
    const sessionId = String(request.headers['x-session-id'] ?? 'anonymous');
    const instanceId = String(request.headers['x-instance-id'] ?? sessionId);
    const session = this.sessions.get(sessionId) ?? { instanceId, steps: [], finalized: false };
    this.sessions.set(sessionId, session);
    const reply = await this.#script(body, { headers: request.headers, step: session.steps.length });
    if ('status' in reply) {
      response.writeHead(reply.status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(reply.body));
      return;
    }
    if ('streamError' in reply) {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.end(`: heartbeat\n\ndata: ${JSON.stringify(reply.streamError)}\n\n`);
      return;
    }
    // As the Dressage proxy answers: each call carries its `index` (proxy-service's tool calls).
    const toolCalls = (reply.tool_calls ?? []).map((call, index) => ({
      id: `call_${session.steps.length}_${index}`,
      type: 'function' as const,
      index,
      function: { name: call.name, arguments: JSON.stringify(call.arguments) },
    }));
    const message: ChatMessage = { role: 'assistant', content: reply.content };
    if (toolCalls.length > 0) message.tool_calls = toolCalls;
    session.steps.push({
      messages: body.messages,
      reply: message,
      turnId: (request.headers['x-turn-id'] as string | undefined) ?? null,
    });
    const finish = toolCalls.length > 0 ? 'tool_calls' : 'stop';
    const usage = {
      prompt_tokens: 10,
      completion_tokens: encode(reply.content).length,
      total_tokens: 10 + encode(reply.content).length,
    };
    if (body.stream !== true) {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(
        JSON.stringify({
          id: `chatcmpl-${session.steps.length}`,
          object: 'chat.completion',
          created: 1,
          model: body.model ?? 'scripted',
          choices: [{ index: 0, message, finish_reason: finish }],
          usage,
        }),
      );
      return;
    }
    response.writeHead(200, { 'content-type': 'text/event-stream' });
    const frame = (delta: object, finishReason: string | null, extra: object = {}) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-s', object: 'chat.completion.chunk', created: 1, model: body.model ?? 'scripted', choices: [{ index: 0, delta, finish_reason: finishReason }], ...extra })}\n\n`;
    // A heartbeat comment first, like the Dressage proxy sends while generating.
    let out = ': heartbeat\n\n';
    out += frame({ role: 'assistant', content: reply.content }, null);
    if (toolCalls.length > 0) {
      out += frame(
        {
          tool_calls: toolCalls.map((call, index) => ({
            index,
            id: call.id,
            type: 'function',
            function: call.function,
          })),
        },
        null,
      );
    }
    out += frame({}, finish);
    out += `data: ${JSON.stringify({ id: 'chatcmpl-s', object: 'chat.completion.chunk', created: 1, model: 'scripted', choices: [], usage })}\n\n`;
    out += 'data: [DONE]\n\n';
    response.end(out);
  }

  #finalize(body: ControlBody): [number, unknown] {
    const session = this.sessions.get(String(body.session_id));
    if (!session) return [404, { detail: 'Session not found' }];
    if (session.steps.length === 0) return [400, { detail: 'Session has no turns' }];
    session.finalized = true;
    return [
      200,
      {
        success: true,
        session_id: body.session_id,
        trajectory_id: body.session_id,
        instance_id: session.instanceId,
        finalization_id: `${String(body.session_id)}-finalization`,
        num_steps: session.steps.length,
        num_turns: 1,
        num_segments: 1,
        num_timeline_segments: session.steps.length,
        history_rewritten: false,
        token_build_mode: 'tito',
        token_build_model: 'qwen3',
        record_token_versions: false,
        mask_nonlast_version_tokens: false,
      },
    ];
  }

  #readTrajectory(body: ControlBody): [number, unknown] {
    const id = String(body.trajectory_id ?? body.session_id);
    const session = this.sessions.get(id);
    if (!session?.finalized)
      return [200, { success: false, mode: 'trajectory', data: [], meta_info: storeStats, drained: false }];
    const data = [segmentOf(id, session.instanceId, session.steps)];
    if (body.drain === true) this.sessions.delete(id);
    return [
      200,
      { success: true, mode: 'trajectory', data, meta_info: storeStats, drained: body.drain === true },
    ];
  }

  async close(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
