import type { ChatMessage } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { createChatmlRenderer } from './chatml-renderer.js';

describe('chatml fixed renderer', () => {
  const renderer = createChatmlRenderer();

  it('renders every message as its own turn, tool results keeping the tool role', () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 's' },
      {
        role: 'user',
        content: [{ type: 'text', text: 'hello ' }, { type: 'image_url' }, { type: 'text', text: 'there' }],
      },
      {
        role: 'assistant',
        content: 'calling',
        reasoning_content: ' why ',
        tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
      },
      { role: 'tool', content: 'r1' },
      { role: 'tool', content: 'r2' },
    ];
    expect(renderer.render(messages, { addGenerationPrompt: true })).toBe(
      '<|im_start|>system\ns<|im_end|>\n' +
        '<|im_start|>user\nhello there<|im_end|>\n' +
        '<|im_start|>assistant\n<think>\nwhy\n</think>\n\ncalling\n<tool_call>\n{"name": "f", "arguments": {"a":1}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>tool\nr1<|im_end|>\n<|im_start|>tool\nr2<|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
  });

  it('omits the think block without reasoning and folds the system text into the tools turn', () => {
    const text = renderer.render(
      [
        { role: 'system', content: 's' },
        { role: 'assistant', content: 'plain' },
      ],
      { tools: [{ type: 'function', function: { name: 'f' } }] },
    );
    expect(text.startsWith('<|im_start|>system\ns\n\n# Tools')).toBe(true);
    expect(text.endsWith('<|im_start|>assistant\nplain<|im_end|>\n')).toBe(true);
    expect(text.match(/<\|im_start\|>system/g)).toHaveLength(1);
  });
});
