import type { ChatMessage } from '@dressage/protocol';
import { DressageError } from '@dressage/protocol';
import { beforeAll, describe, expect, it } from 'vitest';
import { generateConversation, generatedTools } from './__fixtures__/conversations.js';
import { concat, replayLineage } from './__fixtures__/lineage.js';
import { preservingQwen3Renderer, qwen3Tokenizer, qwen35Renderer } from './__fixtures__/qwen3-model.js';
import { TitoIncrementalError } from './errors.js';
import { createChatmlRenderer } from './renderers/chatml-renderer.js';
import { TitoEncoder } from './tito-encoder.js';
import type { TitoTokenizer } from './tokenizer.js';

let tokenizer: TitoTokenizer;
let encoder: TitoEncoder;

beforeAll(async () => {
  tokenizer = await qwen3Tokenizer();
  encoder = new TitoEncoder({ tokenizer, renderer: qwen35Renderer() });
});

const imEnd = 151645;
const newline = 198;

const base: ChatMessage[] = [
  { role: 'system', content: 'You are an agent.' },
  { role: 'user', content: 'List the files.' },
  {
    role: 'assistant',
    content: '',
    reasoning_content: 'I should call ls.',
    tool_calls: [
      { id: 'call_1', type: 'function', function: { name: 'run_shell', arguments: '{"command": "ls"}' } },
      { id: 'call_2', type: 'function', function: { name: 'run_shell', arguments: '{"command": "pwd"}' } },
    ],
  },
];

function promptAndOutput(messages: readonly ChatMessage[]): Int32Array {
  const request = messages.slice(0, -1);
  const prompt = encoder.render(request, { addGenerationPrompt: true });
  const full = encoder.render(messages);
  return tokenizer.encode(`${prompt}${full.slice(prompt.length, -1)}`);
}

describe('TitoEncoder.encodeIncremental', () => {
  it('appends newline, one shared <tool_response> user block for consecutive tools, and the generation prompt', () => {
    const prefixIds = promptAndOutput(base);
    expect(prefixIds.at(-1)).toBe(imEnd);
    const messages: ChatMessage[] = [
      ...base,
      { role: 'tool', content: 'a.txt\nb.txt', tool_call_id: 'call_1' },
      { role: 'tool', content: '/work', tool_call_id: 'call_2' },
    ];
    const delta = encoder.encodeIncremental({ prefixIds, baseMessages: base, messages });
    expect(delta.text).toBe(
      '\n<|im_start|>user\n<tool_response>\na.txt\nb.txt\n</tool_response>\n<tool_response>\n/work\n</tool_response><|im_end|>\n' +
        '<|im_start|>assistant\n<think>\n',
    );
    expect(delta.groupCount).toBe(1);
    expect(delta.ids[0]).toBe(newline);
    expect(tokenizer.decode(delta.ids)).toBe(delta.text);
    expect(delta.mask).toBeInstanceOf(Uint8Array);
    expect(delta.mask.length).toBe(delta.ids.length);
    expect(delta.mask.every((value) => value === 0)).toBe(true);
    expect(delta.version).toBe('-1');
    const stitched = concat(prefixIds, delta.ids);
    expect(Array.from(stitched)).toEqual(
      Array.from(encoder.encodeFull(messages, { addGenerationPrompt: true })),
    );
  });

  it('ends with the generation-prompt delta, honouring enable_thinking', () => {
    const prefixIds = promptAndOutput(base);
    const messages: ChatMessage[] = [...base, { role: 'tool', content: 'x', tool_call_id: 'call_1' }];
    const thinking = encoder.encodeIncremental({ prefixIds, baseMessages: base, messages });
    const plain = encoder.encodeIncremental({
      prefixIds,
      baseMessages: base,
      messages,
      enableThinking: false,
    });
    const thinkingPrompt = tokenizer.encode('<|im_start|>assistant\n<think>\n');
    expect(Array.from(thinking.ids.slice(-thinkingPrompt.length))).toEqual(Array.from(thinkingPrompt));
    expect(plain.text.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
  });

  it('renders each user message as its own group and a tool run after a user as a new block', () => {
    const prefixIds = promptAndOutput(base);
    const messages: ChatMessage[] = [
      ...base,
      { role: 'tool', content: 'one', tool_call_id: 'call_1' },
      { role: 'user', content: 'also this' },
      { role: 'tool', content: 'two', tool_call_id: 'call_2' },
    ];
    const delta = encoder.encodeIncremental({ prefixIds, baseMessages: base, messages });
    expect(delta.groupCount).toBe(3);
    expect(delta.text.split('<|im_start|>user').length - 1).toBe(3);
    expect(tokenizer.decode(concat(prefixIds, delta.ids))).toBe(
      encoder.render(messages, { addGenerationPrompt: true }),
    );
  });

  it('adds no newline when the prefix does not end with <|im_end|> (a truncated output)', () => {
    const prefixIds = promptAndOutput(base).slice(0, -1);
    const messages: ChatMessage[] = [...base, { role: 'user', content: 'go on' }];
    const delta = encoder.encodeIncremental({ prefixIds, baseMessages: base, messages });
    expect(delta.ids[0]).not.toBe(newline);
    expect(delta.text.startsWith('<|im_start|>user\ngo on<|im_end|>\n')).toBe(true);
  });

  it('refuses appended system and assistant messages with a typed error', () => {
    const prefixIds = promptAndOutput(base);
    for (const appended of [
      { role: 'system', content: 'new rules' },
      { role: 'assistant', content: 'prefilled' },
    ] as ChatMessage[]) {
      const attempt = () =>
        encoder.encodeIncremental({ prefixIds, baseMessages: base, messages: [...base, appended] });
      expect(attempt).toThrow(TitoIncrementalError);
      try {
        attempt();
      } catch (error) {
        expect(TitoIncrementalError.isInstance(error)).toBe(true);
        expect(DressageError.isInstance(error)).toBe(true);
        expect((error as TitoIncrementalError).reason).toBe('appended_role_not_allowed');
        expect((error as TitoIncrementalError).code).toBe('failed_precondition');
      }
    }
  });

  it('refuses a rewritten history, an unknown role and an empty prefix', () => {
    const prefixIds = promptAndOutput(base);
    const rewritten = [{ ...base[0]!, content: 'Different system.' }, ...base.slice(1)] as ChatMessage[];
    const reasons: string[] = [];
    for (const attempt of [
      () => encoder.encodeIncremental({ prefixIds, baseMessages: base, messages: rewritten }),
      () => encoder.encodeIncremental({ prefixIds, baseMessages: base, messages: base.slice(0, 2) }),
      () =>
        encoder.encodeIncremental({
          prefixIds,
          baseMessages: base,
          messages: [...base, { role: 'developer', content: 'x' } as unknown as ChatMessage],
        }),
      () => encoder.encodeIncremental({ prefixIds: [], baseMessages: base, messages: base }),
    ]) {
      try {
        attempt();
        reasons.push('none');
      } catch (error) {
        reasons.push((error as TitoIncrementalError).reason);
      }
    }
    expect(reasons).toEqual([
      'history_not_append_only',
      'history_not_append_only',
      'unknown_role',
      'empty_prefix',
    ]);
  });

  it('accepts equivalent history: call ids with punctuation removed, reordered argument keys, trimmed reasoning', () => {
    const prefixIds = promptAndOutput(base);
    const echoed: ChatMessage[] = [
      base[0]!,
      base[1]!,
      {
        role: 'assistant',
        content: null,
        reasoning_content: '  I should call ls.\n',
        tool_calls: [
          {
            id: 'call1',
            type: 'function',
            index: 0,
            function: { name: 'run_shell', arguments: { command: 'ls' } },
          },
          {
            id: 'call-2',
            type: 'function',
            index: 1,
            function: { name: 'run_shell', arguments: '{"command":"pwd"}' },
          },
        ],
      },
      { role: 'user', content: 'thanks' },
    ];
    const delta = encoder.encodeIncremental({ prefixIds, baseMessages: base, messages: echoed });
    expect(delta.text).toBe('\n<|im_start|>user\nthanks<|im_end|>\n<|im_start|>assistant\n<think>\n');
  });

  it('fails with render_diff_not_prefix when a renderer rewrites the context', () => {
    const renderer = qwen35Renderer();
    const unstable = new TitoEncoder({
      tokenizer,
      renderer: {
        ...renderer,
        render: (messages, options) => `${messages.length}${renderer.render(messages, options)}`,
      },
    });
    const messages: ChatMessage[] = [...base, { role: 'user', content: 'next' }];
    expect(() => unstable.encodeIncremental({ prefixIds: [imEnd], baseMessages: base, messages })).toThrow(
      expect.objectContaining({ reason: 'render_diff_not_prefix' }),
    );
  });
});

describe('TITO over generated agent conversations', () => {
  const conversationCount = 500;

  it(`stitched ids decode to the full render and every delta is a render diff (${conversationCount} conversations)`, () => {
    let identicalToFullEncode = 0;
    let withoutEmptyReasoning = 0;
    let deltas = 0;
    for (let seed = 1; seed <= conversationCount; seed++) {
      const { messages, tools } = generateConversation(seed, {
        emptyReasoning: seed % 5 === 0 ? 0.5 : 0,
        stringArguments: seed % 2 === 0,
      });
      const { ids, steps } = replayLineage(encoder, messages, tools);
      const lastRequest = steps.at(-1)!.nextRequest ?? steps.at(-1)!.request;
      const fullText = encoder.render(lastRequest, { tools, addGenerationPrompt: true });
      // Qwen's tokenizer NFC-normalizes its input, so decoding gives the NFC form of the render.
      expect(tokenizer.decode(ids), `seed ${seed}`).toBe(fullText.normalize('NFC'));
      for (const step of steps) {
        if (!step.delta || !step.nextRequest) continue;
        deltas++;
        const baseText = encoder.render(step.nextRequest.slice(0, step.request.length + 1), { tools });
        const nextText = encoder.render(step.nextRequest, { tools, addGenerationPrompt: true });
        // The delta repeats the newline that closes the assistant turn, then continues the render.
        expect(step.delta.text, `seed ${seed}`).toBe(nextText.slice(baseText.length - 1));
        expect(tokenizer.decode(step.delta.ids)).toBe(step.delta.text.normalize('NFC'));
      }
      const fullIds = encoder.encodeFull(lastRequest, { tools, addGenerationPrompt: true });
      const same = fullIds.length === ids.length && fullIds.every((id, index) => id === ids[index]);
      if (same) identicalToFullEncode++;
      const hasEmptyReasoning = messages.some(
        (message) => message.role === 'assistant' && message.reasoning_content === '',
      );
      if (!hasEmptyReasoning) {
        withoutEmptyReasoning++;
        // With non-empty reasoning the renderer puts a special token at every delta boundary, so
        // the stitched ids are exactly the full re-encode.
        expect(same, `seed ${seed}`).toBe(true);
      }
    }
    expect(deltas).toBeGreaterThan(conversationCount);
    expect(withoutEmptyReasoning).toBeGreaterThan(conversationCount * 0.7);
    expect(identicalToFullEncode).toBeLessThan(conversationCount);
    // CPU-bound property test: generous bound for shared two-core CI machines.
  }, 300_000);
});

describe('TITO with the qwen3 and chatml renderers', () => {
  it.each(['qwen3', 'chatml'] as const)(
    'stitched ids decode to the %s full render (100 conversations)',
    async (family) => {
      const renderer = family === 'qwen3' ? await preservingQwen3Renderer() : createChatmlRenderer();
      const familyEncoder = new TitoEncoder({ tokenizer, renderer });
      for (let seed = 1001; seed <= 1100; seed++) {
        const { messages, tools } = generateConversation(seed, {
          emptyReasoning: 0.2,
          stringArguments: true,
        });
        const { ids, steps } = replayLineage(familyEncoder, messages, tools);
        const last = steps.at(-1)!;
        const fullText = familyEncoder.render(last.nextRequest ?? last.request, {
          tools,
          addGenerationPrompt: true,
        });
        expect(tokenizer.decode(ids), `${family} seed ${seed}`).toBe(fullText.normalize('NFC'));
      }
    },
    300_000,
  );
});

describe('retokenization drift', () => {
  it('keeps the model ids for an empty think block, where re-encoding merges "\\n\\n"', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: 'Say hi.' },
      { role: 'assistant', content: 'hi', reasoning_content: '' },
      { role: 'user', content: 'Again.' },
    ];
    const { ids, steps } = replayLineage(encoder, messages, null);
    const output = steps[0]!.outputIds;
    // The model wrote "\n" then </think> after the prompt's "<think>\n".
    expect(Array.from(output.slice(0, 2))).toEqual([newline, tokenizer.requireTokenId('</think>')]);
    const prompt = encoder.encodeFull(messages.slice(0, 1), { addGenerationPrompt: true });
    expect(Array.from(ids.slice(0, prompt.length + output.length))).toEqual([...prompt, ...output]);
    const full = encoder.encodeFull(messages, { addGenerationPrompt: true });
    expect(tokenizer.decode(full)).toBe(tokenizer.decode(ids));
    expect(Array.from(full)).not.toEqual(Array.from(ids));
    expect(Array.from(full)).toContain(tokenizer.encode('\n\n')[0]);
  });

  it('keeps non-canonical model ids that a full re-encode would merge', () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'Name a colour.' },
      { role: 'assistant', content: 'Yellow', reasoning_content: 'Pick one' },
      { role: 'user', content: 'Another.' },
    ];
    // The model spelled "Yellow" as "Y" + "ellow": same text, different ids.
    const splitEncode = (text: string) => {
      const at = text.indexOf('Yellow');
      return concat(tokenizer.encode(text.slice(0, at + 1)), tokenizer.encode(text.slice(at + 1)));
    };
    const { ids, steps } = replayLineage(encoder, messages, null, splitEncode);
    const output = steps[0]!.outputIds;
    const prompt = encoder.encodeFull(messages.slice(0, 2), { addGenerationPrompt: true });
    expect(Array.from(ids.slice(prompt.length, prompt.length + output.length))).toEqual(Array.from(output));
    const full = encoder.encodeFull(messages, { addGenerationPrompt: true });
    expect(tokenizer.decode(full)).toBe(tokenizer.decode(ids));
    expect(full.length).toBe(ids.length - 1);
  });
});

describe('TitoEncoder.encodeFull', () => {
  it('renders and encodes the whole conversation with tools', () => {
    const ids = encoder.encodeFull(base, { tools: generatedTools, addGenerationPrompt: true });
    expect(ids).toBeInstanceOf(Int32Array);
    expect(ids[0]).toBe(tokenizer.requireTokenId('<|im_start|>'));
    expect(tokenizer.decode(ids)).toBe(
      encoder.render(base, { tools: generatedTools, addGenerationPrompt: true }),
    );
  });

  it('needs the renderer turn-end token in the vocabulary', () => {
    const renderer = { ...createChatmlRenderer(), endOfTurn: '<|no_such_token|>' };
    expect(() => new TitoEncoder({ tokenizer, renderer })).toThrow(
      expect.objectContaining({ code: 'failed_precondition' }),
    );
  });
});
