import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  generateConversation,
  generatedTools,
  withoutNullParameters,
} from '../__fixtures__/conversations.js';
import { qwen3Tokenizer, qwen35ChatTemplate } from '../__fixtures__/qwen3-model.js';
import { createChatTemplateRenderer } from '../chat-template-renderer.js';
import { TitoEncoder } from '../tito-encoder.js';
import type { TitoTokenizer } from '../tokenizer.js';
import { createFixedRenderer } from './fixed-renderer.js';
import type { ChatRenderer, RendererFamily } from './renderer.js';
import { readTemplateText } from './template-text.js';

let tokenizer: TitoTokenizer;

beforeAll(async () => {
  tokenizer = await qwen3Tokenizer();
});

describe('readTemplateText', () => {
  it("reads the Qwen3 template's own pieces", () => {
    const text = readTemplateText(createChatTemplateRenderer(tokenizer.chatTemplate!), 'json');
    expect(text.toolsHead).toBe(
      '<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
        'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n',
    );
    expect(text.toolsTail.startsWith('\n</tools>\n\nFor each function call, return a json object')).toBe(
      true,
    );
    expect(text.systemPlace).toEqual({
      in: 'head',
      at: '<|im_start|>system\n'.length,
      before: '',
      after: '\n\n',
    });
    expect(text.toolCall).toEqual({
      format: 'json',
      open: '<tool_call>\n{"name": "',
      beforeArguments: '", "arguments": ',
      close: '}\n</tool_call>',
    });
    expect([text.beforeFirstCall, text.betweenCalls]).toEqual(['\n', '\n']);
    expect([text.toolResultsOpen, text.betweenToolResults, text.toolResultsClose]).toEqual([
      '<|im_start|>user\n<tool_response>\n',
      '\n</tool_response>\n<tool_response>\n',
      '\n</tool_response><|im_end|>\n',
    ]);
    expect([text.generationPrompt, text.generationPromptWithoutThinking]).toEqual([
      '<|im_start|>assistant\n',
      '<|im_start|>assistant\n<think>\n\n</think>\n\n',
    ]);
  });

  it("reads a Qwen3.5-style template's XML call format and the system text after the tools", () => {
    const text = readTemplateText(createChatTemplateRenderer(qwen35ChatTemplate), 'xml');
    expect(text.toolCall).toEqual({
      format: 'xml',
      open: '<tool_call>\n<function=',
      withoutParameters: '>\n</function>\n</tool_call>',
      beforeFirstParameter: '>\n<parameter=',
      beforeValue: '>\n',
      betweenParameters: '\n</parameter>\n<parameter=',
      afterLastParameter: '\n</parameter>\n</function>\n</tool_call>',
    });
    expect(text.toolsTail.endsWith('</IMPORTANT><|im_end|>\n')).toBe(true);
    expect(text.systemPlace).toEqual({
      in: 'tail',
      at: text.toolsTail.length - '<|im_end|>\n'.length,
      before: '\n\n',
      after: '',
    });
    expect([text.beforeFirstCall, text.betweenCalls]).toEqual(['\n\n', '\n']);
    expect(text.generationPrompt).toBe('<|im_start|>assistant\n<think>\n');
  });
});

describe('TITO deltas are what the template in force renders', () => {
  const cases: { family: RendererFamily; template: () => ChatRenderer; renderer: () => ChatRenderer }[] = [
    {
      family: 'qwen3',
      template: () => createChatTemplateRenderer(tokenizer.chatTemplate!),
      renderer: () => createFixedRenderer('qwen3', { chatTemplate: tokenizer.chatTemplate! }),
    },
    {
      family: 'qwen3_5',
      template: () =>
        createChatTemplateRenderer(qwen35ChatTemplate, { variables: { preserve_thinking: true } }),
      renderer: () => createFixedRenderer('qwen3_5', { chatTemplate: qwen35ChatTemplate }),
    },
  ];
  for (const { family, template: makeTemplate, renderer: makeRenderer } of cases) {
    it(`${family}: the appended text and generation prompt, with tools (generated conversations)`, () => {
      const template = makeTemplate();
      const encoder = new TitoEncoder({ tokenizer, renderer: makeRenderer() });
      const imEnd = tokenizer.requireTokenId('<|im_end|>');
      let compared = 0;
      fc.assert(
        fc.property(
          fc.integer({ min: 1, max: 2 ** 31 - 1 }),
          fc.constantFrom(undefined, false),
          (seed, enableThinking) => {
            const messages = withoutNullParameters(generateConversation(seed).messages);
            const options = {
              tools: generatedTools,
              ...(enableThinking === undefined ? {} : { enableThinking }),
            };
            for (let from = 1; from < messages.length; from++) {
              if (messages[from - 1]!.role !== 'assistant' || messages[from]!.role === 'assistant') continue;
              let to = from;
              while (to < messages.length && messages[to]!.role !== 'assistant') to++;
              const base = messages.slice(0, from);
              const request = messages.slice(0, to);
              const before = template.render(base, options);
              const after = template.render(request, { ...options, addGenerationPrompt: true });
              // The model stopped at <|im_end|>; the template's text up to there is the prefix. Where
              // the template rewrites earlier turns (Qwen3 drops old reasoning at a new user query),
              // there is no append to compare and TITO's routing starts a new segment instead.
              if (!after.startsWith(before.slice(0, -1))) continue;
              const delta = encoder.encodeIncremental({
                prefixIds: Int32Array.of(imEnd),
                baseMessages: base,
                messages: request,
                ...(enableThinking === undefined ? {} : { enableThinking }),
              });
              expect(delta.text).toBe(after.slice(before.length - 1));
              expect(tokenizer.decode(delta.ids)).toBe(delta.text.normalize('NFC'));
              compared++;
            }
          },
        ),
        { numRuns: 150 },
      );
      expect(compared).toBeGreaterThan(150);
    });
  }
});
