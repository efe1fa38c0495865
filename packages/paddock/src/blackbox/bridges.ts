// Bridges from the Anthropic Messages API and the OpenAI Responses API onto chat completions, for
// agents that speak only those (Claude Code, Codex). Requests are converted to one non-streaming
// chat completion; a streaming client gets the converted reply replayed as that API's events.
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { SseWriter } from '@dressage/protocol/http';

type Json = Record<string, unknown>;

const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
const asRecord = (value: unknown): Json =>
  value !== null && typeof value === 'object' ? (value as Json) : {};

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  return asArray(content)
    .map((part) => {
      const record = asRecord(part);
      return typeof record.text === 'string' ? record.text : '';
    })
    .join('');
}

/** Anthropic Messages request → chat completions request. */
export function anthropicRequestToChat(body: Json): Json {
  const messages: Json[] = [];
  const system = body.system;
  if (system !== undefined && system !== null) {
    const text = textOf(system);
    if (text !== '') messages.push({ role: 'system', content: text });
  }
  for (const message of asArray(body.messages)) {
    const record = asRecord(message);
    const role = record.role === 'assistant' ? 'assistant' : 'user';
    if (typeof record.content === 'string') {
      messages.push({ role, content: record.content });
      continue;
    }
    const texts: string[] = [];
    const toolCalls: Json[] = [];
    let reasoning = '';
    for (const part of asArray(record.content)) {
      const block = asRecord(part);
      if (block.type === 'text') texts.push(String(block.text ?? ''));
      else if (block.type === 'thinking') reasoning += String(block.thinking ?? '');
      else if (block.type === 'tool_use') {
        toolCalls.push({
          id: block.id,
          type: 'function',
          function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) },
        });
      } else if (block.type === 'tool_result') {
        messages.push({ role: 'tool', tool_call_id: block.tool_use_id, content: textOf(block.content) });
      }
    }
    if (role === 'assistant') {
      const assistant: Json = { role, content: texts.join('') };
      if (toolCalls.length > 0) assistant.tool_calls = toolCalls;
      if (reasoning !== '') assistant.reasoning_content = reasoning;
      messages.push(assistant);
    } else if (texts.length > 0) messages.push({ role, content: texts.join('') });
  }
  const chat: Json = { model: body.model, messages };
  if (typeof body.max_tokens === 'number') chat.max_tokens = body.max_tokens;
  for (const key of ['temperature', 'top_p', 'stop_sequences'] as const) {
    if (body[key] !== undefined) chat[key === 'stop_sequences' ? 'stop' : key] = body[key];
  }
  const tools = asArray(body.tools).map((tool) => {
    const record = asRecord(tool);
    return {
      type: 'function',
      function: { name: record.name, description: record.description, parameters: record.input_schema ?? {} },
    };
  });
  if (tools.length > 0) chat.tools = tools;
  return chat;
}

function parseArguments(text: unknown): unknown {
  if (typeof text !== 'string') return {};
  try {
    return JSON.parse(text);
  } catch {
    return { raw: text };
  }
}

function firstChoice(completion: Json): { message: Json; finish: string | null } {
  const choice = asRecord(asArray(completion.choices)[0]);
  return {
    message: asRecord(choice.message),
    finish: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
  };
}

/** Chat completion → Anthropic Messages response. */
export function chatToAnthropicResponse(completion: Json, model: string): Json {
  const { message, finish } = firstChoice(completion);
  const content: Json[] = [];
  if (typeof message.reasoning_content === 'string' && message.reasoning_content !== '') {
    content.push({ type: 'thinking', thinking: message.reasoning_content, signature: '' });
  }
  const text = textOf(message.content);
  if (text !== '') content.push({ type: 'text', text });
  for (const call of asArray(message.tool_calls)) {
    const record = asRecord(call);
    const fn = asRecord(record.function);
    content.push({ type: 'tool_use', id: record.id, name: fn.name, input: parseArguments(fn.arguments) });
  }
  const usage = asRecord(completion.usage);
  const stop =
    finish === 'tool_calls' || asArray(message.tool_calls).length > 0
      ? 'tool_use'
      : finish === 'length'
        ? 'max_tokens'
        : 'end_turn';
  return {
    id: `msg_${randomBytes(12).toString('hex')}`,
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: stop,
    stop_sequence: null,
    usage: {
      input_tokens: Number(usage.prompt_tokens ?? 0),
      output_tokens: Number(usage.completion_tokens ?? 0),
    },
  };
}

/** An upstream error in the Anthropic error shape. */
export function anthropicErrorBody(status: number, body: unknown): Json {
  const record = asRecord(body);
  const inner = asRecord(record.error ?? record.detail);
  const message =
    typeof inner.message === 'string'
      ? inner.message
      : typeof record.message === 'string'
        ? record.message
        : JSON.stringify(body);
  const type =
    status === 429
      ? 'rate_limit_error'
      : status === 413
        ? 'request_too_large'
        : status >= 500
          ? 'api_error'
          : 'invalid_request_error';
  return { type: 'error', error: { type, message, details: body } };
}

// An event of the Anthropic and Responses streams: named, with its name as `type` in the data too.
function sse(stream: SseWriter, event: string, data: Json): void {
  stream.send({ type: event, ...data }, event);
}

/** Replays an Anthropic message as the Messages API stream events. */
export function writeAnthropicStream(response: ServerResponse, message: Json): void {
  const stream = new SseWriter(response).start();
  const usage = asRecord(message.usage);
  sse(stream, 'message_start', {
    message: {
      ...message,
      content: [],
      stop_reason: null,
      usage: { input_tokens: usage.input_tokens, output_tokens: 0 },
    },
  });
  asArray(message.content).forEach((part, index) => {
    const block = asRecord(part);
    if (block.type === 'text') {
      sse(stream, 'content_block_start', { index, content_block: { type: 'text', text: '' } });
      sse(stream, 'content_block_delta', { index, delta: { type: 'text_delta', text: block.text } });
    } else if (block.type === 'thinking') {
      sse(stream, 'content_block_start', { index, content_block: { type: 'thinking', thinking: '' } });
      sse(stream, 'content_block_delta', {
        index,
        delta: { type: 'thinking_delta', thinking: block.thinking },
      });
    } else {
      sse(stream, 'content_block_start', { index, content_block: { ...block, input: {} } });
      sse(stream, 'content_block_delta', {
        index,
        delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input ?? {}) },
      });
    }
    sse(stream, 'content_block_stop', { index });
  });
  sse(stream, 'message_delta', {
    delta: { stop_reason: message.stop_reason, stop_sequence: null },
    usage: { output_tokens: usage.output_tokens },
  });
  sse(stream, 'message_stop', {});
  stream.end();
}

/** OpenAI Responses request → chat completions request. */
export function responsesRequestToChat(body: Json): Json {
  const messages: Json[] = [];
  if (typeof body.instructions === 'string' && body.instructions !== '') {
    messages.push({ role: 'system', content: body.instructions });
  }
  const input =
    typeof body.input === 'string' ? [{ role: 'user', content: body.input }] : asArray(body.input);
  let pendingCalls: Json[] = [];
  // A reasoning item re-sent in the history belongs to the assistant turn that follows it: as
  // reasoning_content the chat template renders it where the model wrote it.
  let pendingReasoning = '';
  const withReasoning = (message: Json): Json => {
    if (pendingReasoning !== '') message.reasoning_content = pendingReasoning;
    pendingReasoning = '';
    return message;
  };
  const flushCalls = () => {
    if (pendingCalls.length === 0) return;
    messages.push(withReasoning({ role: 'assistant', content: '', tool_calls: pendingCalls }));
    pendingCalls = [];
  };
  for (const item of input) {
    const record = asRecord(item);
    const type = record.type ?? 'message';
    if (type === 'reasoning') {
      flushCalls();
      const parts = [...asArray(record.summary), ...asArray(record.content)].map(asRecord);
      pendingReasoning += parts.map((part) => String(part.text ?? '')).join('');
      continue;
    }
    if (type === 'function_call') {
      pendingCalls.push({
        id: record.call_id,
        type: 'function',
        function: { name: record.name, arguments: record.arguments ?? '{}' },
      });
      continue;
    }
    flushCalls();
    if (type === 'function_call_output') {
      messages.push({ role: 'tool', tool_call_id: record.call_id, content: textOf(record.output) });
    } else if (type === 'message') {
      const role = record.role === 'developer' ? 'system' : String(record.role ?? 'user');
      const message: Json = { role, content: textOf(record.content) };
      messages.push(role === 'assistant' ? withReasoning(message) : message);
    }
  }
  flushCalls();
  const chat: Json = { model: body.model, messages };
  if (typeof body.max_output_tokens === 'number') chat.max_tokens = body.max_output_tokens;
  for (const key of ['temperature', 'top_p'] as const) if (body[key] !== undefined) chat[key] = body[key];
  const tools = asArray(body.tools)
    .map(asRecord)
    .filter((tool) => tool.type === 'function')
    .map((tool) => ({
      type: 'function',
      function: { name: tool.name, description: tool.description, parameters: tool.parameters ?? {} },
    }));
  if (tools.length > 0) chat.tools = tools;
  return chat;
}

/** Chat completion → OpenAI Responses response. */
export function chatToResponsesResponse(completion: Json, model: string): Json {
  const { message } = firstChoice(completion);
  const output: Json[] = [];
  if (typeof message.reasoning_content === 'string' && message.reasoning_content !== '') {
    output.push({
      type: 'reasoning',
      id: `rs_${randomBytes(8).toString('hex')}`,
      summary: [{ type: 'summary_text', text: message.reasoning_content }],
    });
  }
  const text = textOf(message.content);
  if (text !== '' || asArray(message.tool_calls).length === 0) {
    output.push({
      type: 'message',
      id: `msg_${randomBytes(8).toString('hex')}`,
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text, annotations: [] }],
    });
  }
  for (const call of asArray(message.tool_calls)) {
    const record = asRecord(call);
    const fn = asRecord(record.function);
    output.push({
      type: 'function_call',
      id: `fc_${randomBytes(8).toString('hex')}`,
      call_id: record.id,
      name: fn.name,
      arguments: typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {}),
      status: 'completed',
    });
  }
  const usage = asRecord(completion.usage);
  return {
    id: `resp_${randomBytes(12).toString('hex')}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: 'completed',
    model,
    output,
    usage: {
      input_tokens: Number(usage.prompt_tokens ?? 0),
      output_tokens: Number(usage.completion_tokens ?? 0),
      total_tokens: Number(usage.total_tokens ?? 0),
    },
  };
}

/** Replays a Responses API response as its stream events. */
export function writeResponsesStream(response: ServerResponse, body: Json): void {
  const stream = new SseWriter(response).start();
  let sequence = 0;
  const send = (event: string, data: Json) => sse(stream, event, { sequence_number: sequence++, ...data });
  send('response.created', { response: { ...body, status: 'in_progress', output: [] } });
  asArray(body.output).forEach((item, outputIndex) => {
    const record = asRecord(item);
    send('response.output_item.added', { output_index: outputIndex, item: record });
    if (record.type === 'message') {
      const text = textOf(record.content);
      send('response.output_text.delta', {
        output_index: outputIndex,
        content_index: 0,
        item_id: record.id,
        delta: text,
      });
      send('response.output_text.done', {
        output_index: outputIndex,
        content_index: 0,
        item_id: record.id,
        text,
      });
    }
    send('response.output_item.done', { output_index: outputIndex, item: record });
  });
  send('response.completed', { response: body });
  stream.end();
}
