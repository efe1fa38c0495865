import { describe, expect, it } from 'vitest';
import {
  parseHermesToolCalls,
  parseQwen35ToolCalls,
  pythonJson,
  splitReasoningLocal,
  stripTrailingSpecialTokens,
} from './parsers.js';

describe('reasoning (§1.6)', () => {
  it('splits at the first </think>, after the last <think>, trimming', () => {
    expect(splitReasoningLocal('  plan it \n</think>\n\nanswer')).toEqual({
      text: 'answer',
      reasoning: 'plan it',
    });
    expect(splitReasoningLocal('x<think> a </think> b</think>c')).toEqual({
      text: ' b</think>c',
      reasoning: 'a',
    });
    expect(splitReasoningLocal('no tags')).toEqual({ text: 'no tags', reasoning: null });
    expect(splitReasoningLocal('\n</think>\nonly')).toEqual({ text: 'only', reasoning: null });
  });
});

describe('tool calls (§1.6)', () => {
  it('parses Qwen3.5 XML calls with JSON, raw and empty parameter values', () => {
    const text =
      'Let me check.\n<tool_call>\n<function=search>\n<parameter=query>\nweather in Paris\n</parameter>\n<parameter=limit>\n5\n</parameter>\n<parameter=filters>\n{"lang": "fr", "tags": [1, 2]}\n</parameter>\n<parameter=empty>\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=done>\n</function>\n</tool_call>';
    const { content, toolCalls } = parseQwen35ToolCalls(text);
    expect(content).toBe('Let me check.');
    expect(toolCalls.map((call) => call.function)).toEqual([
      {
        name: 'search',
        arguments:
          '{"query": "weather in Paris", "limit": 5, "filters": {"lang": "fr", "tags": [1, 2]}, "empty": ""}',
      },
      { name: 'done', arguments: '{}' },
    ]);
    expect(toolCalls.map((call) => call.index)).toEqual([0, 1]);
    for (const call of toolCalls) expect(call.id).toMatch(/^call[0-9a-f]{8}$/);
  });

  it('leaves a block without a complete function in the content', () => {
    const text = 'x <tool_call>\n<function=broken>\n<parameter=a>\n1\n</parameter>\n</tool_call>';
    expect(parseQwen35ToolCalls(text)).toEqual({ content: text, toolCalls: [] });
  });

  it('parses Hermes JSON calls and skips invalid blocks', () => {
    const { content, toolCalls } = parseHermesToolCalls(
      'a<tool_call>\n{"name": "f", "arguments": {"x": "é"}}\n</tool_call>b<tool_call>not json</tool_call>',
    );
    expect(toolCalls.map((call) => call.function)).toEqual([{ name: 'f', arguments: '{"x": "é"}' }]);
    expect(content).toBe('ab<tool_call>not json</tool_call>');
  });

  it('writes JSON like Python json.dumps(ensure_ascii=False)', () => {
    expect(pythonJson({ a: [1, 2.5, true, null], b: 'ü "q"' })).toBe(
      '{"a": [1, 2.5, true, null], "b": "ü \\"q\\""}',
    );
  });

  it('strips repeated trailing end markers', () => {
    expect(stripTrailingSpecialTokens('done<|im_end|> \n<|endoftext|>')).toBe('done');
    expect(stripTrailingSpecialTokens('<|im_end|> keep')).toBe('<|im_end|> keep');
  });
});
