import type { ChatMessage } from '@dressage/protocol';
import { beforeAll, describe, expect, it } from 'vitest';
import { generateConversation, generatedTools } from '../__fixtures__/conversations.js';
import { qwen3Tokenizer } from '../__fixtures__/qwen3-model.js';
import { createSnapshotRenderer } from '../chat-template-renderer.js';
import { createQwen3Renderer } from './qwen3-renderer.js';
import type { ChatRenderer } from './renderer.js';

let official: ChatRenderer;
let officialRawArguments: ChatRenderer;

beforeAll(async () => {
  const tokenizer = await qwen3Tokenizer();
  official = createSnapshotRenderer(tokenizer);
  officialRawArguments = createSnapshotRenderer(tokenizer, { parseToolArguments: false });
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

// Everything after the system turn: the tool instructions are our own wording, the rest must agree.
function afterSystemTurn(text: string): string {
  return text.startsWith('<|im_start|>system\n') ? text.slice(text.indexOf('<|im_end|>\n') + 11) : text;
}

describe('qwen3 fixed renderer against the official Qwen3 template', () => {
  const fixed = createQwen3Renderer({ preserveThinking: false });

  it('agrees byte for byte without tools (300 generated conversations, both argument forms)', () => {
    for (let seed = 1; seed <= 300; seed++) {
      const stringArguments = seed % 2 === 0;
      const messages = trimmedAssistants(
        generateConversation(seed, { emptyReasoning: 0.2, stringArguments }).messages,
      );
      const reference = stringArguments ? officialRawArguments : official;
      for (const addGenerationPrompt of [false, true]) {
        for (const enableThinking of [undefined, false]) {
          const options = {
            addGenerationPrompt,
            ...(enableThinking === undefined ? {} : { enableThinking }),
          };
          expect(fixed.render(messages, options), `seed ${seed}`).toBe(reference.render(messages, options));
        }
      }
    }
  });

  it('agrees after the system turn with tools, and lists the same tool JSON', () => {
    for (let seed = 301; seed <= 400; seed++) {
      const messages = trimmedAssistants(generateConversation(seed, { stringArguments: true }).messages);
      const mine = fixed.render(messages, { tools: generatedTools, addGenerationPrompt: true });
      const theirs = officialRawArguments.render(messages, {
        tools: generatedTools,
        addGenerationPrompt: true,
      });
      expect(afterSystemTurn(mine), `seed ${seed}`).toBe(afterSystemTurn(theirs));
      const toolLines = (text: string) =>
        text.split('\n').filter((line) => line.startsWith('{"type": "function"'));
      expect(toolLines(mine)).toEqual(toolLines(theirs));
      expect(toolLines(mine)).toHaveLength(generatedTools.length);
    }
  });

  it('with preserved thinking, agrees wherever the official template shows reasoning too', () => {
    const preserving = createQwen3Renderer();
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
      officialRawArguments.render(messages, { addGenerationPrompt: true }),
    );
    // Before the last query the official template drops reasoning; the preserving renderer keeps it.
    const later: ChatMessage[] = [...messages, { role: 'user', content: 'thanks' }];
    expect(preserving.render(later)).toContain('<think>\nlook first\n</think>');
    expect(officialRawArguments.render(later)).not.toContain('look first');
    expect(fixed.render(later)).toBe(officialRawArguments.render(later));
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
