import type { ChatMessage } from '@dressage/protocol';
import { beforeAll, describe, expect, it } from 'vitest';
import { generatedTools } from './__fixtures__/conversations.js';
import { qwen3Tokenizer, qwen35ChatTemplate, qwen35ChatTemplatePath } from './__fixtures__/qwen3-model.js';
import { createChatTemplateRenderer, createSnapshotRenderer } from './chat-template-renderer.js';
import { readChatTemplateFile, readModelFiles } from './model-directory.js';
import type { ChatRenderer } from './renderers/renderer.js';
import { TitoEncoder } from './tito-encoder.js';
import { TitoTokenizer, type TitoTokenizer as Tokenizer } from './tokenizer.js';
import { rendersNoToolsLikeEmptyTools } from './tools-probe.js';

let tokenizer: Tokenizer;
let snapshot: ChatRenderer;

beforeAll(async () => {
  tokenizer = await qwen3Tokenizer();
  snapshot = createSnapshotRenderer(tokenizer);
});

const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Weather in Paris?' },
  {
    role: 'assistant',
    content: '',
    reasoning_content: 'Use the tool.',
    tool_calls: [{ id: 'c1', type: 'function', function: { name: 'search', arguments: '{"q": "Paris"}' } }],
  },
  { role: 'tool', content: 'sunny', tool_call_id: 'c1' },
  { role: 'tool', content: '21°C', tool_call_id: 'c1' },
];

describe('snapshot rendering with the model template', () => {
  it('renders tools, tool calls, shared tool response turns and the generation prompt', () => {
    const text = snapshot.render(conversation, { tools: generatedTools, addGenerationPrompt: true });
    expect(text.startsWith('<|im_start|>system\nYou are terse.\n\n# Tools\n')).toBe(true);
    expect(text).toContain(
      '<|im_start|>assistant\n<think>\nUse the tool.\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"q": "Paris"}}\n</tool_call><|im_end|>\n',
    );
    expect(text).toContain(
      '<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n21°C\n</tool_response><|im_end|>\n',
    );
    expect(text.endsWith('<|im_end|>\n<|im_start|>assistant\n')).toBe(true);
  });

  it('honours enable_thinking=false and leaves the prompt open without add_generation_prompt', () => {
    expect(snapshot.render(conversation, { addGenerationPrompt: true, enableThinking: false })).toMatch(
      /<\|im_start\|>assistant\n<think>\n\n<\/think>\n\n$/,
    );
    expect(snapshot.render(conversation)).toMatch(/<\/tool_response><\|im_end\|>\n$/);
  });

  it('drops reasoning before the last user query, as the official template does', () => {
    const later: ChatMessage[] = [...conversation, { role: 'user', content: 'And tomorrow?' }];
    expect(snapshot.render(later)).not.toContain('Use the tool.');
  });

  it('renders the same text as the prompt ids TITO starts from', () => {
    const encoder = new TitoEncoder({ tokenizer, renderer: snapshot });
    const ids = encoder.encodeFull(conversation, { addGenerationPrompt: true });
    expect(tokenizer.decode(ids)).toBe(snapshot.render(conversation, { addGenerationPrompt: true }));
    // The template's generation prompt depends on history in general, so TITO diffs the full request.
    const base = conversation.slice(0, 3);
    const prefix = tokenizer.encode(`${snapshot.render(base)}`.slice(0, -1));
    const delta = encoder.encodeIncremental({
      prefixIds: prefix,
      baseMessages: base,
      messages: conversation,
    });
    expect(tokenizer.decode([...prefix, ...delta.ids])).toBe(
      snapshot.render(conversation, { addGenerationPrompt: true }),
    );
  });

  it('treats tools null and [] alike for Qwen3', () => {
    expect(rendersNoToolsLikeEmptyTools(snapshot)).toBe(true);
    const listsTools = createChatTemplateRenderer('{{ tools is defined }}');
    expect(rendersNoToolsLikeEmptyTools(listsTools)).toBe(false);
  });

  it('reports a template that does not parse or fails to render, and a model without one', async () => {
    expect(() => createChatTemplateRenderer('{% if %}')).toThrow(
      expect.objectContaining({ code: 'invalid_argument' }),
    );
    const failing = createChatTemplateRenderer('{{ raise_exception("no") }}');
    expect(() => failing.render(conversation)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    const files = await readModelFiles(tokenizer.files.directory);
    const withoutTemplate = new TitoTokenizer({ ...files, chatTemplate: null });
    expect(() => createSnapshotRenderer(withoutTemplate)).toThrow(
      expect.objectContaining({ code: 'failed_precondition' }),
    );
  });

  it("renders a template given to replace the model directory's, read from its file", async () => {
    const given = await readChatTemplateFile(qwen35ChatTemplatePath);
    expect(given).toBe(qwen35ChatTemplate);
    const replaced = createSnapshotRenderer(tokenizer, { chatTemplate: given });
    const messages: ChatMessage[] = [{ role: 'user', content: 'hi' }];
    expect(replaced.render(messages, { addGenerationPrompt: true })).toBe(
      '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n',
    );
    expect(snapshot.render(messages, { addGenerationPrompt: true })).toBe(
      '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
    );
    await expect(readChatTemplateFile(`${qwen35ChatTemplatePath}.missing`)).rejects.toMatchObject({
      code: 'not_found',
    });
    await expect(readChatTemplateFile('/dev/null')).rejects.toMatchObject({ code: 'invalid_argument' });
  });
});
