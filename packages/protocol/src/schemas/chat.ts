import { z } from 'zod';
import { jsonObjectSchema } from './common.js';

/** A content part of a multi-part message. Only text parts are rendered into prompts. */
export const contentPartSchema = z
  .looseObject({ type: z.string().min(1), text: z.unknown().optional() })
  .superRefine((part, context) => {
    if (part.type === 'text' && typeof part.text !== 'string') {
      context.addIssue({ code: 'custom', path: ['text'], message: 'a text part needs a string "text"' });
    }
  });

/** A content part of a multi-part message. */
export type ContentPart = z.infer<typeof contentPartSchema>;

/** Message content: a string, a list of parts, or null (assistant messages with tool calls). */
export const messageContentSchema = z.union([z.string(), z.array(contentPartSchema)]);

/** A tool call the assistant made. `arguments` is a JSON string (an object is tolerated). */
export const toolCallSchema = z.looseObject({
  id: z.string().optional(),
  type: z.literal('function').optional(),
  index: z.int().nonnegative().optional(),
  function: z.looseObject({
    name: z.string().min(1),
    arguments: z.union([z.string(), jsonObjectSchema]),
  }),
});

/** A tool call the assistant made. */
export type ToolCall = z.infer<typeof toolCallSchema>;

const nameField = z.string().optional();

/** A system message. */
export const systemMessageSchema = z.looseObject({
  role: z.literal('system'),
  content: messageContentSchema,
  name: nameField,
});

/** A user message. */
export const userMessageSchema = z.looseObject({
  role: z.literal('user'),
  content: messageContentSchema,
  name: nameField,
});

/** An assistant message: text, reasoning and tool calls. */
export const assistantMessageSchema = z.looseObject({
  role: z.literal('assistant'),
  content: messageContentSchema.nullish(),
  reasoning_content: z.string().nullish(),
  tool_calls: z.array(toolCallSchema).nullish(),
  name: nameField,
});

/** A tool result message. */
export const toolMessageSchema = z.looseObject({
  role: z.literal('tool'),
  content: messageContentSchema,
  tool_call_id: z.string().optional(),
  name: nameField,
});

/** One chat message, discriminated by `role`. */
export const chatMessageSchema = z.discriminatedUnion('role', [
  systemMessageSchema,
  userMessageSchema,
  assistantMessageSchema,
  toolMessageSchema,
]);

/** One chat message, discriminated by `role`. */
export type ChatMessage = z.infer<typeof chatMessageSchema>;
/** An assistant message. */
export type AssistantMessage = z.infer<typeof assistantMessageSchema>;
/** A tool result message. */
export type ToolMessage = z.infer<typeof toolMessageSchema>;

/** A function tool the model may call. */
export const toolSchema = z.looseObject({
  type: z.literal('function'),
  function: z.looseObject({
    name: z.string().min(1),
    description: z.string().optional(),
    parameters: jsonObjectSchema.optional(),
    strict: z.boolean().nullish(),
  }),
});

/** A function tool the model may call. */
export type Tool = z.infer<typeof toolSchema>;

/**
 * The subset of an OpenAI chat completion request the proxy reads, plus the Dressage id fallbacks
 * (`session_id`, `instance_id`, `turn_id`, `sandbox_id`). Other keys (stop, seed, n, tool_choice, ...)
 * are accepted and ignored.
 */
export const chatCompletionRequestSchema = z.looseObject({
  messages: z.array(chatMessageSchema).min(1),
  model: z.string().optional(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
  tools: z.array(toolSchema).nullish(),
  temperature: z.number().min(0).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  // SGLang's rule: -1 disables top-k, anything else must keep at least one token.
  top_k: z
    .int()
    .refine((value) => value === -1 || value >= 1, 'must be -1 (no top-k) or at least 1')
    .nullish(),
  max_tokens: z.int().positive().nullish(),
  session_id: z.string().min(1).nullish(),
  instance_id: z.string().min(1).nullish(),
  turn_id: z.string().min(1).nullish(),
  sandbox_id: z.string().min(1).nullish(),
});

/** A chat completion request as the proxy reads it. */
export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;

/** Token counts of one completion. */
export const usageSchema = z.looseObject({
  prompt_tokens: z.int().nonnegative(),
  completion_tokens: z.int().nonnegative(),
  total_tokens: z.int().nonnegative(),
});

/** Token counts of one completion. */
export type Usage = z.infer<typeof usageSchema>;

/** Why generation stopped, as the proxy reports it. */
export const finishReasonSchema = z.enum(['stop', 'length', 'tool_calls']);

/** Why generation stopped, as the proxy reports it. */
export type FinishReason = z.infer<typeof finishReasonSchema>;

const responseToolCallSchema = z.looseObject({
  id: z.string(),
  type: z.literal('function'),
  index: z.int().nonnegative(),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});

/** A non-streamed chat completion response. */
export const chatCompletionResponseSchema = z.looseObject({
  id: z.string(),
  object: z.literal('chat.completion'),
  created: z.int(),
  model: z.string(),
  choices: z
    .array(
      z.looseObject({
        index: z.int().nonnegative(),
        message: z.looseObject({
          role: z.literal('assistant'),
          content: z.string().nullable(),
          reasoning_content: z.string().optional(),
          tool_calls: z.array(responseToolCallSchema).optional(),
        }),
        finish_reason: finishReasonSchema,
      }),
    )
    .min(1),
  usage: usageSchema,
});

/** A non-streamed chat completion response. */
export type ChatCompletionResponse = z.infer<typeof chatCompletionResponseSchema>;

/** One `chat.completion.chunk` frame of a streamed response. */
export const chatCompletionChunkSchema = z.looseObject({
  id: z.string(),
  object: z.literal('chat.completion.chunk'),
  created: z.int(),
  model: z.string(),
  choices: z.array(
    z.looseObject({
      index: z.int().nonnegative(),
      delta: z.looseObject({
        role: z.literal('assistant').optional(),
        content: z.string().nullish(),
        reasoning_content: z.string().nullish(),
        tool_calls: z
          .array(
            z.looseObject({
              index: z.int().nonnegative(),
              id: z.string().optional(),
              type: z.literal('function').optional(),
              function: z
                .looseObject({ name: z.string().optional(), arguments: z.string().optional() })
                .optional(),
            }),
          )
          .optional(),
      }),
      finish_reason: finishReasonSchema.nullable(),
    }),
  ),
  usage: usageSchema.nullish(),
});

/** One `chat.completion.chunk` frame of a streamed response. */
export type ChatCompletionChunk = z.infer<typeof chatCompletionChunkSchema>;
