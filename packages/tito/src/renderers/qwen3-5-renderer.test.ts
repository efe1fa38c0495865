import type { ChatMessage } from '@dressage/protocol';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  generateConversation,
  generatedTools,
  withoutNullParameters,
} from '../__fixtures__/conversations.js';
import { qwen3Tokenizer, qwen35ChatTemplate, qwen35Renderer } from '../__fixtures__/qwen3-model.js';
import { createChatTemplateRenderer } from '../chat-template-renderer.js';
import { createFixedRenderer, inferRendererFamily } from './fixed-renderer.js';

const renderer = qwen35Renderer();
// TITO renders with preserve_thinking, so the renderer is held to the template with it set.
const template = createChatTemplateRenderer(qwen35ChatTemplate, { variables: { preserve_thinking: true } });

describe('qwen3_5 fixed renderer over a Qwen3.5-style template', () => {
  it('agrees byte for byte with tools, tool calls and tool results (generated conversations)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 - 1 }),
        fc.boolean(),
        fc.boolean(),
        fc.constantFrom(undefined, false),
        fc.integer({ min: 0, max: generatedTools.length }),
        (seed, stringArguments, addGenerationPrompt, enableThinking, toolCount) => {
          const { messages } = generateConversation(seed, { emptyReasoning: 0.2, stringArguments });
          const conversation = withoutNullParameters(messages);
          const options = {
            tools: generatedTools.slice(0, toolCount),
            addGenerationPrompt,
            ...(enableThinking === undefined ? {} : { enableThinking }),
          };
          expect(renderer.render(conversation, options)).toBe(template.render(conversation, options));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('takes its tool instructions and call format from the template in force', () => {
    const reworded = qwen35ChatTemplate
      .replace('You have access to the following functions:', 'Functions at hand:')
      .replaceAll("'<parameter=' + name + '>\\n'", "'<parameter=' + name + '>'");
    expect(reworded).not.toBe(qwen35ChatTemplate);
    const other = createFixedRenderer('qwen3_5', { chatTemplate: reworded });
    const otherTemplate = createChatTemplateRenderer(reworded, { variables: { preserve_thinking: true } });
    const messages: ChatMessage[] = [
      { role: 'user', content: 'Read a.txt' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [{ type: 'function', function: { name: 'read_file', arguments: '{"path": "a.txt"}' } }],
      },
      { role: 'tool', content: 'alpha' },
    ];
    const options = { tools: generatedTools, addGenerationPrompt: true };
    const text = other.render(messages, options);
    expect(text).toBe(otherTemplate.render(messages, options));
    expect(text).toContain('Functions at hand:');
    expect(text).toContain('<parameter=path>a.txt\n</parameter>');
  });

  it('refuses the Qwen3 template (JSON calls), naming itself, the template and the first differing text', async () => {
    const tokenizer = await qwen3Tokenizer();
    expect(() =>
      createFixedRenderer('qwen3_5', {
        chatTemplate: tokenizer.chatTemplate!,
        templateName: 'qwen3/tokenizer_config.json',
      }),
    ).toThrow(
      expect.objectContaining({
        code: 'failed_precondition',
        message: expect.stringMatching(
          /^The qwen3_5 renderer cannot reproduce the chat template qwen3\/tokenizer_config\.json: .* the template renders ".+" where the renderer writes ".+"$/,
        ),
        details: expect.objectContaining({ renderer: 'qwen3_5', template: 'qwen3/tokenizer_config.json' }),
      }),
    );
    expect(() => createFixedRenderer('qwen3', { chatTemplate: qwen35ChatTemplate })).toThrow(
      /^The qwen3 renderer cannot reproduce the chat template: cannot read a tool call/,
    );
  });

  it('renders XML tool calls with one parameter block per argument', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: 'edit' },
      {
        role: 'assistant',
        content: 'Editing now.',
        reasoning_content: '\n need to edit \n',
        tool_calls: [
          {
            type: 'function',
            function: {
              name: 'write_file',
              arguments:
                '{"path": "a.txt", "content": "line 1\\nline 2", "options": {"mode": 420}, "force": true, "tags": [1, "x"]}',
            },
          },
          { type: 'function', function: { name: 'run_shell', arguments: { command: 'ls' } } },
        ],
      },
    ];
    expect(renderer.render(messages)).toBe(
      '<|im_start|>user\nedit<|im_end|>\n' +
        '<|im_start|>assistant\n<think>\nneed to edit\n</think>\n\nEditing now.\n\n' +
        '<tool_call>\n<function=write_file>\n' +
        '<parameter=path>\na.txt\n</parameter>\n' +
        '<parameter=content>\nline 1\nline 2\n</parameter>\n' +
        '<parameter=options>\n{"mode": 420}\n</parameter>\n' +
        '<parameter=force>\ntrue\n</parameter>\n' +
        '<parameter=tags>\n[1, "x"]\n</parameter>\n' +
        '</function>\n</tool_call>\n' +
        '<tool_call>\n<function=run_shell>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call><|im_end|>\n',
    );
  });

  it('always keeps reasoning, as an empty think block when there is none', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: 'a' },
      { role: 'assistant', content: 'b', reasoning_content: 'first thought' },
      { role: 'user', content: 'c' },
      { role: 'assistant', content: 'd' },
    ];
    const text = renderer.render(messages);
    expect(text).toContain('<|im_start|>assistant\n<think>\nfirst thought\n</think>\n\nb<|im_end|>\n');
    expect(text).toContain('<|im_start|>assistant\n<think>\n\n</think>\n\nd<|im_end|>\n');
  });

  it('puts consecutive tool results in one user turn and starts a new one after a user message', () => {
    const messages: ChatMessage[] = [
      { role: 'tool', content: 'r1' },
      { role: 'tool', content: 'r2' },
      { role: 'user', content: 'u' },
      { role: 'tool', content: 'r3' },
    ];
    expect(renderer.render(messages)).toBe(
      '<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n' +
        '<|im_start|>user\nu<|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\nr3\n</tool_response><|im_end|>\n',
    );
  });

  it('lists tools before the system text and opens the generation prompt with <think>', () => {
    const text = renderer.render(
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hi' },
      ],
      { tools: generatedTools.slice(0, 1), addGenerationPrompt: true },
    );
    expect(text.startsWith('<|im_start|>system\n# Tools\n')).toBe(true);
    expect(text).toContain(
      `<tools>\n${JSON.stringify(generatedTools[0]).replaceAll('":', '": ').replaceAll(',"', ', "')}\n</tools>`,
    );
    expect(text).toContain('\n\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n');
    expect(text.endsWith('<|im_start|>assistant\n<think>\n')).toBe(true);
    expect(renderer.render([], { addGenerationPrompt: true, enableThinking: false })).toBe(
      '<|im_start|>assistant\n<think>\n\n</think>\n\n',
    );
  });

  it('refuses arguments that are not a JSON object and unknown roles', () => {
    const bad: ChatMessage[] = [
      {
        role: 'assistant',
        content: '',
        tool_calls: [{ type: 'function', function: { name: 'f', arguments: '[1]' } }],
      },
    ];
    expect(() => renderer.render(bad)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => renderer.render([{ role: 'critic', content: 'x' } as unknown as ChatMessage])).toThrow(
      expect.objectContaining({ reason: 'unknown_role' }),
    );
  });
});

describe('createFixedRenderer and inferRendererFamily', () => {
  it('creates each family and refuses unknown ones', async () => {
    const tokenizer = await qwen3Tokenizer();
    expect(createFixedRenderer('qwen3_5', { chatTemplate: qwen35ChatTemplate }).name).toBe('qwen3_5');
    expect(createFixedRenderer('qwen3', { chatTemplate: tokenizer.chatTemplate! }).name).toBe('qwen3');
    expect(createFixedRenderer('chatml', { chatTemplate: qwen35ChatTemplate }).name).toBe('chatml');
    expect(() => createFixedRenderer('llama' as never, { chatTemplate: qwen35ChatTemplate })).toThrow(
      expect.objectContaining({ code: 'invalid_argument' }),
    );
  });

  it('infers the family from a template', () => {
    expect(inferRendererFamily('<|im_start|>{{ "<tool_call>\\n<function=" }}<parameter=')).toBe('qwen3_5');
    expect(inferRendererFamily('<|im_start|> <tool_call>')).toBe('qwen3');
    expect(inferRendererFamily('<|im_start|>')).toBe('chatml');
    expect(inferRendererFamily('[INST]')).toBeNull();
    expect(inferRendererFamily(null)).toBeNull();
  });
});
