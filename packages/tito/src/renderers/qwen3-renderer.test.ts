import type { ChatMessage } from '@dressage/protocol';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { generateConversation, generatedTools as toolList } from '../__fixtures__/conversations.js';
import { preservingQwen3Renderer, qwen3Tokenizer } from '../__fixtures__/qwen3-model.js';
import { createChatTemplateRenderer, createSnapshotRenderer } from '../chat-template-renderer.js';
import { createFixedRenderer } from './fixed-renderer.js';
import type { ChatRenderer } from './renderer.js';

let qwen3Template: string;
let official: ChatRenderer;
let fixed: ChatRenderer;

beforeAll(async () => {
  const tokenizer = await qwen3Tokenizer();
  qwen3Template = tokenizer.chatTemplate!;
  official = createSnapshotRenderer(tokenizer);
  fixed = createFixedRenderer('qwen3', { chatTemplate: qwen3Template, eosToken: tokenizer.eosToken });
});

// The proxy's parsers hand back trimmed assistant text. Trimming also sidesteps a gap of
// @huggingface/jinja 0.5.11: its strip/lstrip/rstrip ignore the characters argument (Python's
// `lstrip('\n')` keeps a leading space, the library drops it); the fixed renderer follows Python.
function trimmedAssistants(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.map((message) =>
    message.role === 'assistant'
      ? {
          ...message,
          content: typeof message.content === 'string' ? message.content.trim() : message.content,
          reasoning_content: message.reasoning_content?.trim(),
        }
      : message,
  );
}

describe('qwen3 fixed renderer over the official Qwen3 template', () => {
  it('drops old reasoning as the template does, since the template ignores preserve_thinking', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: 'q1' },
      { role: 'assistant', content: 'a1', reasoning_content: 'r1' },
      { role: 'user', content: 'q2' },
    ];
    expect(official.render(messages)).not.toContain('r1');
    expect(fixed.render(messages)).toBe(official.render(messages));
  });

  it('agrees byte for byte with tools, tool calls and tool results (generated conversations)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 - 1 }),
        fc.boolean(),
        fc.boolean(),
        fc.constantFrom(undefined, false),
        (seed, stringArguments, addGenerationPrompt, enableThinking) => {
          const { messages, tools } = generateConversation(seed, { emptyReasoning: 0.2, stringArguments });
          const trimmed = trimmedAssistants(messages);
          const options = {
            tools: tools === null ? generatedTools(seed) : tools,
            addGenerationPrompt,
            ...(enableThinking === undefined ? {} : { enableThinking }),
          };
          expect(fixed.render(trimmed, options)).toBe(official.render(trimmed, options));
          expect(fixed.render(trimmed, { ...options, tools: null })).toBe(
            official.render(trimmed, { ...options, tools: null }),
          );
        },
      ),
      { numRuns: 300 },
    );
  });

  it('takes its tool instructions from the template in force, whatever they say', () => {
    const reworded = qwen3Template
      .replace('You may call one or more functions to assist with the user query.', 'Tools help; use them.')
      .replace('For each function call, return a json object', 'Answer a call as a json object');
    expect(reworded).not.toBe(qwen3Template);
    const renderer = createFixedRenderer('qwen3', { chatTemplate: reworded });
    const template = createChatTemplateRenderer(reworded);
    const messages: ChatMessage[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather?' },
    ];
    const tools = generatedTools(1);
    const text = renderer.render(messages, { tools, addGenerationPrompt: true });
    expect(text).toBe(template.render(messages, { tools, addGenerationPrompt: true }));
    expect(text).toContain('Tools help; use them.');
    expect(text).toContain('Answer a call as a json object');
    expect(text).not.toContain('You may call one or more functions');
  });

  it('with preserved thinking, agrees wherever the official template shows reasoning too', async () => {
    const preserving = await preservingQwen3Renderer();
    // One user query, then only agent steps: every assistant turn comes after the last query.
    const messages: ChatMessage[] = [
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'fix the bug' },
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'look first',
        tool_calls: [{ type: 'function', function: { name: 'read_file', arguments: '{"path": "a.ts"}' } }],
      },
      { role: 'tool', content: 'const a = 1;' },
      { role: 'assistant', content: 'Done.', reasoning_content: 'it is fine' },
    ];
    expect(preserving.render(messages, { addGenerationPrompt: true })).toBe(
      official.render(messages, { addGenerationPrompt: true }),
    );
    // Before the last query the official template drops reasoning; the preserving renderer keeps it.
    const later: ChatMessage[] = [...messages, { role: 'user', content: 'thanks' }];
    expect(preserving.render(later)).toContain('<think>\nlook first\n</think>');
    expect(official.render(later)).not.toContain('look first');
    expect(fixed.render(later)).toBe(official.render(later));
  });

  it('strips only newlines around content, as Python does', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: ' \n indented', reasoning_content: 'r' },
    ];
    expect(fixed.render(messages)).toContain('</think>\n\n \n indented<|im_end|>');
  });

  it('splits reasoning out of raw content holding </think> like the official template', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: '<think>\nhmm\n</think>\n\nanswer' },
    ];
    expect(fixed.render(messages)).toBe(official.render(messages));
    expect(fixed.render(messages)).toContain('<think>\nhmm\n</think>\n\nanswer<|im_end|>');
  });
});

// One to four tools, so that tool lists of several lengths are covered.
function generatedTools(seed: number) {
  return toolList.slice(0, 1 + (seed % toolList.length));
}
