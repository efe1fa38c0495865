// The OpenAI Responses API on top of chat completions, for agents that speak only it (Codex). A
// request is parsed at the edge, converted to one non-streaming chat completion, and the reply is
// converted back; a streaming client gets it replayed as the Responses API's events.
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
import { completionMessage, partsText, textPartsSchema } from './bridge-parts.js';

/** An input item of a Responses request; items of types the bridge does not read are skipped. */
const inputItemSchema = z
  .looseObject({
    // Codex writes absent fields as null (a reasoning item re-sent has `content: null`).
    type: z.string().nullish(),
    role: z.enum(['user', 'assistant', 'system', 'developer']).nullish(),
    content: textPartsSchema.nullish(),
    summary: z.array(z.looseObject({ text: z.string().nullish() })).nullish(),
    call_id: z.string().nullish(),
    name: z.string().nullish(),
    arguments: z.string().nullish(),
    output: textPartsSchema.nullish(),
  })
  .superRefine((item, context) => {
    const need = (field: 'call_id' | 'name') => {
      if (typeof item[field] !== 'string') {
        context.addIssue({
          code: 'custom',
          path: [field],
          message: `a ${item.type} item needs a string "${field}"`,
        });
      }
    };
    if (item.type === 'function_call') {
      need('call_id');
      need('name');
    } else if (item.type === 'function_call_output') need('call_id');
  });

/** An input item of a Responses request. */
export type ResponsesInputItem = z.infer<typeof inputItemSchema>;

/** The part of an OpenAI Responses request the bridge reads; other keys are accepted and ignored. */
export const responsesRequestSchema = z.looseObject({
  model: z.string().optional(),
  instructions: z.string().nullish(),
  input: z.union([z.string(), z.array(inputItemSchema)]),
  max_output_tokens: z.int().positive().nullish(),
  temperature: z.number().nullish(),
  top_p: z.number().nullish(),
  stream: z.boolean().nullish(),
  // Built-in tools (web search, ...) have no function to call here and are dropped.
  tools: z
    .array(
      z.looseObject({
        type: z.string(),
        name: z.string().optional(),
        description: z.string().nullish(),
        parameters: jsonObjectSchema.nullish(),
      }),
    )
    .optional(),
});

/** A Responses request as the bridge reads it. */
export type ResponsesRequest = z.infer<typeof responsesRequestSchema>;

/** An output item of a Responses response. */
export type ResponsesOutputItem =
  | { type: 'reasoning'; id: string; summary: { type: 'summary_text'; text: string }[] }
  | {
      type: 'message';
      id: string;
      role: 'assistant';
      status: 'completed';
      content: { type: 'output_text'; text: string; annotations: [] }[];
    }
  | {
      type: 'function_call';
      id: string;
      call_id: string;
      name: string;
      arguments: string;
      status: 'completed';
    };

/** A Responses API response. */
export interface ResponsesResponse {
  id: string;
  object: 'response';
  created_at: number;
  status: 'completed';
  model: string;
  output: ResponsesOutputItem[];
  usage: { input_tokens: number; output_tokens: number; total_tokens: number };
}

/** OpenAI Responses request → chat completions request. */
export function responsesRequestToChat(body: ResponsesRequest): ChatCompletionRequest {
  const messages: ChatMessage[] = [];
  if (body.instructions) messages.push({ role: 'system', content: body.instructions });
  const input: ResponsesInputItem[] =
    typeof body.input === 'string' ? [{ type: 'message', role: 'user', content: body.input }] : body.input;
  let pendingCalls: ToolCall[] = [];
  // A reasoning item re-sent in the history belongs to the assistant turn that follows it: as
  // reasoning_content the chat template renders it where the model wrote it.
  let pendingReasoning = '';
  const assistant = (content: string, toolCalls?: ToolCall[]): ChatMessage => {
    const message: ChatMessage = { role: 'assistant', content };
    if (toolCalls) message.tool_calls = toolCalls;
    if (pendingReasoning !== '') message.reasoning_content = pendingReasoning;
    pendingReasoning = '';
    return message;
  };
  const flushCalls = () => {
    if (pendingCalls.length === 0) return;
    messages.push(assistant('', pendingCalls));
    pendingCalls = [];
  };
  for (const item of input) {
    const type = item.type ?? 'message';
    if (type === 'reasoning') {
      flushCalls();
      pendingReasoning +=
        (item.summary ?? []).map((part) => part.text ?? '').join('') + partsText(item.content);
      continue;
    }
    // The schema requires call_id (and name) on these two types.
    if (type === 'function_call') {
      pendingCalls.push({
        id: item.call_id ?? '',
        type: 'function',
        function: { name: item.name ?? '', arguments: item.arguments ?? '{}' },
      });
      continue;
    }
    flushCalls();
    if (type === 'function_call_output') {
      messages.push({ role: 'tool', tool_call_id: item.call_id ?? '', content: partsText(item.output) });
    } else if (type === 'message') {
      const role = item.role === 'developer' ? 'system' : (item.role ?? 'user');
      const content = partsText(item.content);
      messages.push(role === 'assistant' ? assistant(content) : { role, content });
    }
  }
  flushCalls();
  const chat: ChatCompletionRequest = { model: body.model, messages };
  if (body.max_output_tokens) chat.max_tokens = body.max_output_tokens;
  if (body.temperature !== undefined) chat.temperature = body.temperature;
  if (body.top_p !== undefined) chat.top_p = body.top_p;
  const tools = (body.tools ?? []).flatMap((tool): Tool[] =>
    tool.type === 'function' && tool.name
      ? [
          {
            type: 'function',
            function: {
              name: tool.name,
              description: tool.description ?? undefined,
              parameters: tool.parameters ?? {},
            },
          },
        ]
      : [],
  );
  if (tools.length > 0) chat.tools = tools;
  return chat;
}

/** Chat completion → OpenAI Responses response. */
export function chatToResponsesResponse(
  completion: ChatCompletionResponse,
  model: string,
): ResponsesResponse {
  const { message } = completionMessage(completion);
  const output: ResponsesOutputItem[] = [];
  if (message.reasoning_content) {
    output.push({
      type: 'reasoning',
      id: `rs_${randomBytes(8).toString('hex')}`,
      summary: [{ type: 'summary_text', text: message.reasoning_content }],
    });
  }
  const text = message.content ?? '';
  const calls = message.tool_calls ?? [];
  if (text !== '' || calls.length === 0) {
    output.push({
      type: 'message',
      id: `msg_${randomBytes(8).toString('hex')}`,
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text, annotations: [] }],
    });
  }
  for (const call of calls) {
    output.push({
      type: 'function_call',
      id: `fc_${randomBytes(8).toString('hex')}`,
      call_id: call.id,
      name: call.function.name,
      arguments: call.function.arguments,
      status: 'completed',
    });
  }
  return {
    id: `resp_${randomBytes(12).toString('hex')}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: 'completed',
    model,
    output,
    usage: {
      input_tokens: completion.usage.prompt_tokens,
      output_tokens: completion.usage.completion_tokens,
      total_tokens: completion.usage.total_tokens,
    },
  };
}

/** Replays a Responses API response as that API's stream events. */
export function writeResponsesStream(response: ServerResponse, body: ResponsesResponse): void {
  const stream = new SseWriter(response).start();
  let sequence = 0;
  // Each event is named, with its name as `type` and its place in the stream in the data too.
  const send = (event: string, data: object) =>
    stream.send({ type: event, sequence_number: sequence++, ...data }, event);
  send('response.created', { response: { ...body, status: 'in_progress', output: [] } });
  body.output.forEach((item, outputIndex) => {
    send('response.output_item.added', { output_index: outputIndex, item });
    if (item.type === 'message') {
      const text = item.content.map((part) => part.text).join('');
      const where = { output_index: outputIndex, content_index: 0, item_id: item.id };
      send('response.output_text.delta', { ...where, delta: text });
      send('response.output_text.done', { ...where, text });
    }
    send('response.output_item.done', { output_index: outputIndex, item });
  });
  send('response.completed', { response: body });
  stream.end();
}
