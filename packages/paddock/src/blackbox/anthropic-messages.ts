// The Anthropic Messages API on top of chat completions, for agents that speak only it (Claude Code).
// A request is parsed at the edge, converted to one non-streaming chat completion, and the reply is
// converted back; a streaming client gets it replayed as the Messages API's events.
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import {
  type ChatCompletionRequest,
  type ChatCompletionResponse,
  type ChatMessage,
  jsonObjectSchema,
  type Tool,
  type ToolCall,
} from '@dressage/protocol';
import { SseWriter } from '@dressage/protocol/http';
import { z } from 'zod';
import { completionMessage, parseArgumentsText, partsText, textPartsSchema } from './bridge-parts.js';
import { upstreamErrorMessage } from './upstream-errors.js';

/** A content block of a Messages request; blocks of types the bridge does not read pass through unread. */
const contentBlockSchema = z
  .looseObject({
    type: z.string(),
    text: z.string().optional(),
    thinking: z.string().optional(),
    id: z.string().optional(),
    name: z.string().optional(),
    input: z.unknown().optional(),
    tool_use_id: z.string().optional(),
    content: textPartsSchema.optional(),
  })
  .superRefine((block, context) => {
    const need = (field: 'text' | 'thinking' | 'id' | 'name' | 'tool_use_id') => {
      if (typeof block[field] !== 'string') {
        context.addIssue({
          code: 'custom',
          path: [field],
          message: `a ${block.type} block needs a string "${field}"`,
        });
      }
    };
    if (block.type === 'text') need('text');
    else if (block.type === 'thinking') need('thinking');
    else if (block.type === 'tool_use') {
      need('id');
      need('name');
    } else if (block.type === 'tool_result') need('tool_use_id');
  });

/** The part of an Anthropic Messages request the bridge reads; other keys are accepted and ignored. */
export const anthropicMessagesRequestSchema = z.looseObject({
  model: z.string().optional(),
  system: textPartsSchema.nullish(),
  messages: z.array(
    z.looseObject({
      // Claude Code sends `system` turns inside the conversation too (its environment notes).
      role: z.enum(['user', 'assistant', 'system']),
      content: z.union([z.string(), z.array(contentBlockSchema)]),
    }),
  ),
  max_tokens: z.int().positive().optional(),
  temperature: z.number().optional(),
  top_p: z.number().optional(),
  stop_sequences: z.array(z.string()).optional(),
  stream: z.boolean().nullish(),
  tools: z
    .array(
      z.looseObject({
        name: z.string().min(1),
        description: z.string().optional(),
        input_schema: jsonObjectSchema.optional(),
      }),
    )
    .optional(),
});

/** An Anthropic Messages request as the bridge reads it. */
export type AnthropicMessagesRequest = z.infer<typeof anthropicMessagesRequestSchema>;

/** A content block of a Messages response. */
export type AnthropicContentBlock =
  | { type: 'text'; text: string }
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown };

/** A Messages API response. */
export interface AnthropicMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: AnthropicContentBlock[];
  stop_reason: 'end_turn' | 'tool_use' | 'max_tokens';
  stop_sequence: null;
  usage: { input_tokens: number; output_tokens: number };
}

/** A Messages API error body. */
export interface AnthropicErrorBody {
  type: 'error';
  error: { type: string; message: string; details?: unknown };
}

function assistantTurn(blocks: readonly z.infer<typeof contentBlockSchema>[]): ChatMessage {
  let text = '';
  let reasoning = '';
  const toolCalls: ToolCall[] = [];
  for (const block of blocks) {
    if (block.type === 'text') text += block.text;
    else if (block.type === 'thinking') reasoning += block.thinking;
    else if (block.type === 'tool_use') {
      toolCalls.push({
        id: block.id,
        type: 'function',
        function: { name: block.name ?? '', arguments: JSON.stringify(block.input ?? {}) },
      });
    }
  }
  return {
    role: 'assistant',
    content: text,
    ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
    ...(reasoning !== '' ? { reasoning_content: reasoning } : {}),
  };
}

// A user turn's tool results become tool messages, in order, before the turn's own text.
function userTurn(blocks: readonly z.infer<typeof contentBlockSchema>[], into: ChatMessage[]): void {
  const texts: string[] = [];
  for (const block of blocks) {
    if (block.type === 'text') texts.push(block.text ?? '');
    else if (block.type === 'tool_result') {
      into.push({ role: 'tool', tool_call_id: block.tool_use_id, content: partsText(block.content) });
    }
  }
  if (texts.length > 0) into.push({ role: 'user', content: texts.join('') });
}

/** Anthropic Messages request → chat completions request. */
export function anthropicRequestToChat(body: AnthropicMessagesRequest): ChatCompletionRequest {
  const messages: ChatMessage[] = [];
  const system = partsText(body.system);
  if (system !== '') messages.push({ role: 'system', content: system });
  for (const message of body.messages) {
    if (typeof message.content === 'string') messages.push({ role: message.role, content: message.content });
    else if (message.role === 'assistant') messages.push(assistantTurn(message.content));
    else if (message.role === 'system')
      messages.push({ role: 'system', content: partsText(message.content) });
    else userTurn(message.content, messages);
  }
  const chat: ChatCompletionRequest = { model: body.model, messages };
  if (body.max_tokens !== undefined) chat.max_tokens = body.max_tokens;
  if (body.temperature !== undefined) chat.temperature = body.temperature;
  if (body.top_p !== undefined) chat.top_p = body.top_p;
  if (body.stop_sequences !== undefined) chat.stop = body.stop_sequences;
  const tools = (body.tools ?? []).map(
    (tool): Tool => ({
      type: 'function',
      function: { name: tool.name, description: tool.description, parameters: tool.input_schema ?? {} },
    }),
  );
  if (tools.length > 0) chat.tools = tools;
  return chat;
}

/** Chat completion → Anthropic Messages response. */
export function chatToAnthropicResponse(completion: ChatCompletionResponse, model: string): AnthropicMessage {
  const { message, finish } = completionMessage(completion);
  const content: AnthropicContentBlock[] = [];
  if (message.reasoning_content) {
    content.push({ type: 'thinking', thinking: message.reasoning_content, signature: '' });
  }
  if (message.content) content.push({ type: 'text', text: message.content });
  const calls = message.tool_calls ?? [];
  for (const call of calls) {
    content.push({
      type: 'tool_use',
      id: call.id,
      name: call.function.name,
      input: parseArgumentsText(call.function.arguments),
    });
  }
  const stop =
    finish === 'tool_calls' || calls.length > 0
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
      input_tokens: completion.usage.prompt_tokens,
      output_tokens: completion.usage.completion_tokens,
    },
  };
}

/** An upstream error in the Messages API's error shape. */
export function anthropicErrorBody(status: number, body: unknown): AnthropicErrorBody {
  const message = upstreamErrorMessage(body);
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

// An event of the Messages stream: named, with its name as `type` in the data too.
function send(stream: SseWriter, event: string, data: object): void {
  stream.send({ type: event, ...data }, event);
}

/** Replays a Messages API response as that API's stream events. */
export function writeAnthropicStream(response: ServerResponse, message: AnthropicMessage): void {
  const stream = new SseWriter(response).start();
  send(stream, 'message_start', {
    message: {
      ...message,
      content: [],
      stop_reason: null,
      usage: { input_tokens: message.usage.input_tokens, output_tokens: 0 },
    },
  });
  message.content.forEach((block, index) => {
    if (block.type === 'text') {
      send(stream, 'content_block_start', { index, content_block: { type: 'text', text: '' } });
      send(stream, 'content_block_delta', { index, delta: { type: 'text_delta', text: block.text } });
    } else if (block.type === 'thinking') {
      send(stream, 'content_block_start', { index, content_block: { type: 'thinking', thinking: '' } });
      send(stream, 'content_block_delta', {
        index,
        delta: { type: 'thinking_delta', thinking: block.thinking },
      });
    } else {
      send(stream, 'content_block_start', { index, content_block: { ...block, input: {} } });
      send(stream, 'content_block_delta', {
        index,
        delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input ?? {}) },
      });
    }
    send(stream, 'content_block_stop', { index });
  });
  send(stream, 'message_delta', {
    delta: { stop_reason: message.stop_reason, stop_sequence: null },
    usage: { output_tokens: message.usage.output_tokens },
  });
  send(stream, 'message_stop', {});
  stream.end();
}
