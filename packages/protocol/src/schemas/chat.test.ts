import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { safeParseWire, type ValidationIssue } from '../validation.js';
import { nonStreamResponse, streamFrames, toolConversationRequest } from './__fixtures__/payloads.js';
import {
  chatCompletionChunkSchema,
  chatCompletionRequestSchema,
  chatCompletionResponseSchema,
  chatMessageSchema,
  toolSchema,
} from './chat.js';

function issuePaths(schema: z.ZodType, value: unknown): string[] {
  const result = safeParseWire(schema, value, 'payload');
  if (result.success) return [];
  return (result.error.details.issues as ValidationIssue[]).map((issue) => issue.path);
}

describe('chat completion request', () => {
  it('accepts a tool conversation with reasoning, tool calls, tool messages and ignored extras', () => {
    const parsed = chatCompletionRequestSchema.parse(toolConversationRequest);
    expect(parsed.messages).toHaveLength(4);
    expect(parsed.tools?.[0]?.function.name).toBe('calculator');
    expect(parsed.stream_options?.include_usage).toBe(true);
    // Unread keys pass through untouched rather than failing the request.
    expect((parsed as Record<string, unknown>).tool_choice).toBe('auto');
    const assistant = parsed.messages[2];
    expect(assistant?.role).toBe('assistant');
    if (assistant?.role === 'assistant') {
      expect(assistant.reasoning_content).toBe('I should use the calculator.');
      expect(assistant.tool_calls?.[0]?.function.arguments).toBe('{"expression": "12 + 30"}');
    }
  });

  it('accepts the minimal request and the id fallbacks in the body', () => {
    const parsed = chatCompletionRequestSchema.parse({
      messages: [{ role: 'user', content: 'hi' }],
      session_id: 's1',
      instance_id: 'i1',
      turn_id: 't1',
      sandbox_id: 'sb1',
      top_k: -1,
    });
    expect(parsed.session_id).toBe('s1');
    expect(parsed.model).toBeUndefined();
  });

  it('names the bad field of a malformed request', () => {
    expect(issuePaths(chatCompletionRequestSchema, { messages: [] })).toEqual(['messages']);
    expect(issuePaths(chatCompletionRequestSchema, {})).toEqual(['messages']);
    expect(
      issuePaths(chatCompletionRequestSchema, {
        messages: [{ role: 'user', content: 'a' }, { role: 'robot' }],
      }),
    ).toEqual(['messages[1].role']);
    expect(
      issuePaths(chatCompletionRequestSchema, {
        messages: [
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'c', type: 'function', function: { name: '', arguments: '{}' } }],
          },
        ],
      }),
    ).toEqual(['messages[0].tool_calls[0].function.name']);
    expect(
      issuePaths(chatCompletionRequestSchema, { messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }),
    ).toEqual(['max_tokens']);
    expect(
      issuePaths(chatCompletionRequestSchema, {
        messages: [{ role: 'user', content: 'x' }],
        temperature: 'hot',
      }),
    ).toEqual(['temperature']);
    for (const topK of [0, -2, 1.5]) {
      expect(
        issuePaths(chatCompletionRequestSchema, { messages: [{ role: 'user', content: 'x' }], top_k: topK }),
      ).toEqual(['top_k']);
    }
    for (const topK of [-1, 1, 40]) {
      expect(
        issuePaths(chatCompletionRequestSchema, { messages: [{ role: 'user', content: 'x' }], top_k: topK }),
      ).toEqual([]);
    }
    expect(
      issuePaths(chatCompletionRequestSchema, {
        messages: [{ role: 'user', content: 'x' }],
        tools: [{ type: 'function', function: { description: 'no name' } }],
      }),
    ).toEqual(['tools[0].function.name']);
  });

  it('reports the failing message and field in the error text', () => {
    const result = safeParseWire(
      chatCompletionRequestSchema,
      { messages: [{ role: 'user', content: 5 }] },
      'request',
    );
    expect(result.success).toBe(false);
    if (!result.success) {
      expect(result.error.code).toBe('invalid_argument');
      expect(result.error.message).toMatch(/^Invalid request: messages\[0\]\.content/);
    }
  });
});

describe('chat messages and tools', () => {
  it('requires content on user, system and tool messages but not on assistant messages', () => {
    expect(chatMessageSchema.safeParse({ role: 'assistant' }).success).toBe(true);
    expect(chatMessageSchema.safeParse({ role: 'user' }).success).toBe(false);
    expect(chatMessageSchema.safeParse({ role: 'tool', content: 'r' }).success).toBe(true);
    expect(
      chatMessageSchema.safeParse({ role: 'system', content: [{ type: 'text', text: 's' }] }).success,
    ).toBe(true);
  });

  it('rejects a text part without text', () => {
    expect(issuePaths(chatMessageSchema, { role: 'user', content: [{ type: 'text' }] })).toEqual([
      'content[0].text',
    ]);
    expect(
      chatMessageSchema.safeParse({ role: 'user', content: [{ type: 'image_url', image_url: {} }] }).success,
    ).toBe(true);
  });

  it('validates a tool definition', () => {
    expect(toolSchema.safeParse({ type: 'function', function: { name: 'f' } }).success).toBe(true);
    expect(issuePaths(toolSchema, { type: 'retrieval', function: { name: 'f' } })).toEqual(['type']);
  });
});

describe('chat completion response and chunks', () => {
  it('accepts the documented non-stream response', () => {
    const parsed = chatCompletionResponseSchema.parse(nonStreamResponse);
    expect(parsed.choices[0]?.finish_reason).toBe('tool_calls');
    expect(parsed.usage.total_tokens).toBe(150);
  });

  it('rejects an unknown finish reason and a missing usage', () => {
    const badFinish = structuredClone(nonStreamResponse);
    (badFinish.choices[0] as { finish_reason: string }).finish_reason = 'abort';
    expect(issuePaths(chatCompletionResponseSchema, badFinish)).toEqual(['choices[0].finish_reason']);
    const { usage: _usage, ...noUsage } = nonStreamResponse;
    expect(issuePaths(chatCompletionResponseSchema, noUsage)).toEqual(['usage']);
  });

  it('accepts every frame of the documented pseudo-stream', () => {
    for (const frame of streamFrames)
      expect(chatCompletionChunkSchema.parse(frame).id).toBe('chatcmpl-0123456789ab');
  });

  it('rejects a chunk with the wrong object type', () => {
    expect(issuePaths(chatCompletionChunkSchema, { ...streamFrames[0], object: 'chat.completion' })).toEqual([
      'object',
    ]);
  });
});
