import type { ChatMessage } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { generateConversation, generatedTools } from '../__fixtures__/conversations.js';
import { preservingQwen3Renderer, qwen3Tokenizer, qwen35Renderer } from '../__fixtures__/qwen3-model.js';
import { createSnapshotRenderer } from '../chat-template-renderer.js';
import { messageText, rendersAlike } from '../messages.js';
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

  it('qwen3 without preserved reasoning: continues exactly, and only where the earlier text stays', async () => {
    const tokenizer = await qwen3Tokenizer();
    // The official template drops reasoning before the last query and keeps an empty think block on
    // the last turn only while it is last: continuations are exact only where neither applies.
    const official = createSnapshotRenderer(tokenizer);
    const renderer = createFixedRenderer('qwen3', {
      chatTemplate: tokenizer.chatTemplate!,
      eosToken: tokenizer.eosToken,
    });
    let continued = 0;
    let refused = 0;
    let continuedAfterToolsOnly = 0;
    for (let seed = 1; seed <= 150; seed++) {
      const messages = officialShapes(seed);
      const tools = seed % 3 === 0 ? null : generatedTools;
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
          const whole = renderer.render(messages, options);
          // The fixed renderer is the template's text: check both against the template itself.
          expect(earlier).toBe(official.render(messages.slice(0, from), { tools }));
          expect(whole).toBe(official.render(messages, options));
          if (continuation === null) {
            // Refused only where the earlier render really is not the start of the whole one.
            expect(whole.startsWith(earlier)).toBe(false);
            refused++;
          } else {
            expect(earlier + continuation).toBe(whole);
            continued++;
            if (messages.slice(from).every((message) => message.role !== 'user')) continuedAfterToolsOnly++;
          }
        }
      }
    }
    expect(continued).toBeGreaterThan(500);
    expect(continuedAfterToolsOnly).toBeGreaterThan(300);
    expect(refused).toBeGreaterThan(500);
  });

  it('qwen3 without preserved reasoning: refuses a new query, and a last turn without reasoning', async () => {
    const tokenizer = await qwen3Tokenizer();
    const renderer = createFixedRenderer('qwen3', {
      chatTemplate: tokenizer.chatTemplate!,
      eosToken: tokenizer.eosToken,
    });
    const call = { id: 'c1', type: 'function' as const, function: { name: 'ls', arguments: '{}' } };
    const messages: ChatMessage[] = [
      { role: 'user', content: 'q1' },
      { role: 'assistant', content: '', reasoning_content: 'r1', tool_calls: [call] },
      { role: 'tool', content: 'out', tool_call_id: 'c1' },
      { role: 'assistant', content: 'a2', reasoning_content: '' },
    ];
    // Tool results after a turn with reasoning: continued.
    expect(renderer.renderFrom!(messages.slice(0, 3), 2)).toBe(
      '<|im_start|>user\n<tool_response>\nout\n</tool_response><|im_end|>\n',
    );
    // A new query drops the reasoning of every turn before it.
    const longer: ChatMessage[] = [...messages.slice(0, 2), { role: 'user', content: 'q2' }];
    expect(renderer.render(longer).startsWith(renderer.render(messages.slice(0, 2)))).toBe(false);
    expect(renderer.renderFrom!(longer, 2)).toBeNull();
    // The last turn's empty think block goes once another message follows it.
    const after: ChatMessage[] = [...messages, { role: 'user', content: '<tool_response>x</tool_response>' }];
    expect(renderer.render(messages)).toContain('<think>\n\n</think>\n\na2');
    expect(renderer.render(after)).not.toContain('<think>\n\n</think>');
    expect(renderer.renderFrom!(after, 4)).toBeNull();
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

/**
 * Generated conversations in the shapes the official Qwen3 template treats apart: assistant text
 * trimmed (as the proxy's parsers give it, which also sidesteps @huggingface/jinja's strip ignoring
 * its characters argument), some turns without reasoning, some with their reasoning inside the
 * content, some user turns that wrap tool results (not queries), and some conversations without
 * any query.
 */
function officialShapes(seed: number): ChatMessage[] {
  const { messages } = generateConversation(seed, {
    emptyReasoning: 0.25,
    stringArguments: seed % 2 === 0,
    turns: 2 + (seed % 9),
  });
  const shaped = messages.map((message, index): ChatMessage => {
    if (message.role === 'assistant') {
      const content = typeof message.content === 'string' ? message.content.trim() : '';
      const reasoning = (message.reasoning_content ?? '').trim();
      // Raw model text: the template splits the reasoning out of the content.
      // (Not where the text itself holds think tags: the template splits at the first and last tag,
      // then strips with the same library gap.)
      if (index % 4 === 1 && reasoning !== '' && !`${reasoning}${content}`.includes('think>')) {
        const { reasoning_content: _, ...rest } = message;
        return { ...rest, content: `<think>\n${reasoning}\n</think>\n\n${content}` };
      }
      return { ...message, content, reasoning_content: reasoning };
    }
    if (message.role === 'user' && index > 1 && (seed + index) % 3 === 0)
      return { role: 'user', content: `<tool_response>\n${messageText(message.content)}\n</tool_response>` };
    return message;
  });
  // No query at all: a system message, then agent turns and tool results.
  if (seed % 7 === 0) return shaped.filter((message) => message.role !== 'user');
  return shaped;
}
