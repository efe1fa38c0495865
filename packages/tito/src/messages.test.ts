import type { ChatMessage, Tool } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { toCanonicalJson, toTemplateJson } from './json-format.js';
import {
  canonicalToolsJson,
  firstMismatch,
  isMessagePrefix,
  messageText,
  normalizeMessage,
  toolsHash,
} from './messages.js';

describe('normalizeMessage', () => {
  it('canonicalises tool calls, ids, reasoning and empty content', () => {
    const message: ChatMessage = {
      role: 'assistant',
      content: '',
      reasoning_content: '  why \n',
      tool_calls: [
        {
          id: 'call_a-1',
          type: 'function',
          index: 3,
          function: { name: 'f', arguments: '{"b": 1, "a": {"d": [1, 2], "c": "é"}}' },
        },
      ],
    };
    expect(normalizeMessage(message)).toEqual({
      role: 'assistant',
      content: null,
      reasoning_content: 'why',
      tool_calls: [
        {
          id: 'calla1',
          type: 'function',
          function: { name: 'f', arguments: '{"a":{"c":"é","d":[1,2]},"b":1}' },
        },
      ],
    });
  });

  it('drops empty reasoning, joins text parts and sanitises tool_call_id', () => {
    expect(normalizeMessage({ role: 'assistant', content: 'x', reasoning_content: '  ' })).toEqual({
      role: 'assistant',
      content: 'x',
    });
    expect(normalizeMessage({ role: 'tool', content: 'r', tool_call_id: 'call:9' })).toEqual({
      role: 'tool',
      content: 'r',
      tool_call_id: 'call9',
    });
    expect(
      messageText([{ type: 'text', text: 'a' }, { type: 'image_url' }, { type: 'text', text: 'b' }]),
    ).toBe('ab');
  });
});

describe('append-only checks', () => {
  const history: ChatMessage[] = [
    { role: 'user', content: 'q' },
    {
      role: 'assistant',
      content: 'a',
      tool_calls: [{ id: 'x_1', function: { name: 'f', arguments: '{"k":1}' } }],
    },
  ];

  it('accepts an extension with equivalent messages', () => {
    const echoed: ChatMessage[] = [
      { role: 'user', content: [{ type: 'text', text: 'q' }] },
      {
        role: 'assistant',
        content: 'a',
        tool_calls: [{ id: 'x1', type: 'function', function: { name: 'f', arguments: { k: 1 } } }],
      },
      { role: 'tool', content: 'r' },
    ];
    expect(isMessagePrefix(history, echoed)).toBe(true);
    expect(isMessagePrefix([], echoed)).toBe(true);
  });

  it('finds the first rewritten message', () => {
    const rewritten: ChatMessage[] = [history[0]!, { role: 'assistant', content: 'b' }];
    expect(firstMismatch(history, rewritten)).toBe(1);
    expect(firstMismatch(history, history.slice(0, 1))).toBe(1);
    expect(isMessagePrefix(history, [{ role: 'user', content: 'other' }, history[1]!])).toBe(false);
  });

  it('ignores names and tool_call_id only in the content comparison', () => {
    const named: ChatMessage[] = [{ role: 'user', content: 'q', name: 'alice' }];
    expect(isMessagePrefix([history[0]!], named)).toBe(false);
    expect(isMessagePrefix([history[0]!], named, 'content')).toBe(true);
  });
});

describe('tools hash and JSON forms', () => {
  const tools: Tool[] = [{ type: 'function', function: { name: 'f', parameters: { b: 1, a: 2 } } }];

  it('hashes the canonical JSON, independent of key order', () => {
    const reordered: Tool[] = [{ function: { parameters: { a: 2, b: 1 }, name: 'f' }, type: 'function' }];
    expect(canonicalToolsJson(tools)).toBe(
      '[{"function":{"name":"f","parameters":{"a":2,"b":1}},"type":"function"}]',
    );
    expect(toolsHash(reordered)).toBe(toolsHash(tools));
    expect(toolsHash(tools)).toMatch(/^[0-9a-f]{64}$/);
    expect(toolsHash(null)).not.toBe(toolsHash([]));
    expect(toolsHash(undefined)).toBe(toolsHash(null));
  });

  it('writes template JSON with Python separators and raw unicode', () => {
    expect(toTemplateJson({ b: [1, 2.5, null, true], a: 'é\n"' })).toBe(
      '{"b": [1, 2.5, null, true], "a": "é\\n\\""}',
    );
    expect(toCanonicalJson({ b: 1, a: { d: undefined, c: [] } })).toBe('{"a":{"c":[]},"b":1}');
  });
});
