import type { ChatMessage } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { generateConversation } from '../__fixtures__/conversations.js';
import { preservingQwen3Renderer, qwen3Tokenizer, qwen35Renderer } from '../__fixtures__/qwen3-model.js';
import { rendersAlike } from '../messages.js';
import { createChatmlRenderer } from './chatml-renderer.js';
import { createFixedRenderer } from './fixed-renderer.js';
import type { ChatRenderer, RenderOptions } from './renderer.js';

const renderers: Record<'qwen3_5' | 'qwen3' | 'chatml', () => Promise<ChatRenderer> | ChatRenderer> = {
  qwen3_5: qwen35Renderer,
  qwen3: preservingQwen3Renderer,
  chatml: createChatmlRenderer,
};

describe('renderFrom', () => {
  for (const family of ['qwen3_5', 'qwen3', 'chatml'] as const) {
    it(`${family}: the text after an assistant turn extends the earlier render exactly`, async () => {
      const renderer = await renderers[family]();
      let checked = 0;
      for (let seed = 1; seed <= 300; seed++) {
        const { messages, tools } = generateConversation(seed, { stringArguments: seed % 2 === 0 });
        // Content-part arrays and a thinking switch too, so every field the render reads varies.
        if (seed % 5 === 0)
          messages.push({ role: 'user', content: [{ type: 'text', text: `parts ${seed}` }] });
        const variants: RenderOptions[] = [
          { tools },
          { tools, addGenerationPrompt: true },
          { tools, addGenerationPrompt: true, enableThinking: false },
        ];
        for (let from = 0; from <= messages.length; from++) {
          for (const options of variants) {
            const continuation = renderer.renderFrom!(messages, from, options);
            if (from === 0 || messages[from - 1]!.role !== 'assistant') {
              expect(continuation).toBeNull();
              continue;
            }
            const earlier = renderer.render(messages.slice(0, from), { tools });
            expect(earlier + continuation).toBe(renderer.render(messages, options));
            checked++;
          }
        }
      }
      expect(checked).toBeGreaterThan(1000);
    });
  }

  it('is not offered where earlier turns change as the conversation grows (qwen3 dropping old reasoning)', async () => {
    const tokenizer = await qwen3Tokenizer();
    const renderer = createFixedRenderer('qwen3', {
      chatTemplate: tokenizer.chatTemplate!,
      eosToken: tokenizer.eosToken,
    });
    expect(renderer.renderFrom).toBeUndefined();
    const messages: ChatMessage[] = [
      { role: 'user', content: 'q1' },
      { role: 'assistant', content: 'a1', reasoning_content: 'r1' },
    ];
    const longer: ChatMessage[] = [...messages, { role: 'user', content: 'q2' }];
    expect(renderer.render(longer).startsWith(renderer.render(messages))).toBe(false);
  });

  it('refuses unknown roles in the continuation', () => {
    const renderer = qwen35Renderer();
    const messages = [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'a' },
      { role: 'robot', content: 'x' },
    ] as unknown as ChatMessage[];
    expect(() => renderer.renderFrom!(messages, 2)).toThrow(/Message 2 has role "robot"/);
  });
});

describe('rendersAlike', () => {
  const assistant: ChatMessage = {
    role: 'assistant',
    content: null,
    reasoning_content: 'think',
    tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'ls', arguments: '{"path":"."}' } }],
  };

  it('accepts a copy as an agent echoes it back, and tells apart every field a render reads', () => {
    expect(rendersAlike(assistant, JSON.parse(JSON.stringify(assistant)) as ChatMessage)).toBe(true);
    expect(rendersAlike(assistant, { ...assistant, content: undefined })).toBe(true);
    const variants: ChatMessage[] = [
      { ...assistant, role: 'user' } as ChatMessage,
      { ...assistant, content: '' },
      { ...assistant, reasoning_content: 'other' } as ChatMessage,
      { ...assistant, name: 'bot' },
      { ...assistant, tool_calls: [] },
      { ...assistant, tool_calls: [{ ...assistant.tool_calls![0]!, id: 'call_2' }] },
      {
        ...assistant,
        tool_calls: [{ ...assistant.tool_calls![0]!, function: { name: 'ls', arguments: '{"path": "."}' } }],
      },
      {
        ...assistant,
        tool_calls: [{ ...assistant.tool_calls![0]!, function: { name: 'ls', arguments: { path: '.' } } }],
      },
    ];
    for (const variant of variants) expect(rendersAlike(assistant, variant)).toBe(false);
    const tool: ChatMessage = { role: 'tool', content: 'out', tool_call_id: 'call_1' };
    expect(rendersAlike(tool, { ...tool })).toBe(true);
    expect(rendersAlike(tool, { ...tool, tool_call_id: 'call_9' })).toBe(false);
  });

  it('does not vouch for content parts, which can spell the same text several ways', () => {
    const parts: ChatMessage = { role: 'user', content: [{ type: 'text', text: 'hi' }] };
    expect(rendersAlike(parts, parts)).toBe(true);
    expect(rendersAlike(parts, { ...parts, content: [{ type: 'text', text: 'hi' }] })).toBe(false);
  });
});
