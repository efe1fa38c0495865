import { segmentSchema } from '@dressage/protocol';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, startHarness } from './__fixtures__/harness.js';

// The official OpenAI SDK is the agent; the proxy uses the real Qwen3 tokenizer with the qwen3_5
// TITO renderer; a scripted engine answers with the ids of scripted text.
let harness: Harness;
beforeAll(async () => {
  harness = await startHarness({ tokenizer: 'qwen', config: { recordTokenVersions: true } });
});
afterAll(async () => {
  await harness?.close();
});

const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

const toolCallOutput =
  'The user wants the file.\n</think>\n\n<tool_call>\n<function=read_file>\n<parameter=path>\n/tmp/a.txt\n</parameter>\n</function>\n</tool_call><|im_end|>';

describe('the OpenAI SDK as the agent', () => {
  it('runs a multi-turn tool-using conversation recorded token for token', async () => {
    harness.engine.script = (_request, index) =>
      index === 0
        ? { text: toolCallOutput }
        : { text: 'Done thinking.\n</think>\n\nThe file says hello.<|im_end|>' };
    const session = { headers: { 'X-Session-Id': 'agent-1', 'X-Instance-Id': 'group-1' } };
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
      { role: 'system', content: 'You are a careful agent.' },
      { role: 'user', content: 'What is in /tmp/a.txt?' },
    ];
    const first = await harness.openai.chat.completions.create({ model: 'qwen', messages, tools }, session);
    const reply = first.choices[0]!;
    expect(reply.finish_reason).toBe('tool_calls');
    expect(reply.message.content).toBeNull();
    expect((reply.message as unknown as { reasoning_content: string }).reasoning_content).toBe(
      'The user wants the file.',
    );
    expect(reply.message.tool_calls).toHaveLength(1);
    const call = reply.message.tool_calls![0]!;
    expect(call.id).toMatch(/^call[0-9a-f]{8}$/);
    expect(call.type).toBe('function');
    if (call.type !== 'function') throw new Error('function call expected');
    expect(call.function).toEqual({ name: 'read_file', arguments: '{"path": "/tmp/a.txt"}' });
    expect(first.usage?.prompt_tokens).toBe(harness.engine.requests[0]!.body.input_ids.length);

    messages.push(reply.message, { role: 'tool', tool_call_id: call.id, content: 'hello' });
    const second = await harness.openai.chat.completions.create({ model: 'qwen', messages, tools }, session);
    expect(second.choices[0]!.message.content).toBe('The file says hello.');
    expect(second.choices[0]!.finish_reason).toBe('stop');

    // TITO: the second prompt starts with the first prompt and the model's own output ids, untouched.
    const firstPrompt = harness.engine.requests[0]!.body.input_ids;
    const firstOutput = harness.tokenizer.encodeText(toolCallOutput);
    const secondPrompt = harness.engine.requests[1]!.body.input_ids;
    expect(secondPrompt.slice(0, firstPrompt.length + firstOutput.length)).toEqual([
      ...firstPrompt,
      ...firstOutput,
    ]);
    const delta = harness.tokenizer.encodeText(
      '\n<|im_start|>user\n<tool_response>\nhello\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n',
    );
    expect(secondPrompt.slice(firstPrompt.length + firstOutput.length)).toEqual([...delta]);

    const finalized = await fetch(`${harness.url}/session/finalize`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ session_id: 'agent-1' }),
    }).then((response) => response.json());
    expect(finalized).toMatchObject({ num_steps: 2, num_segments: 1, instance_id: 'group-1' });
    const read = await fetch(`${harness.url}/trajectory/read`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ trajectory_id: 'agent-1', drain: true }),
    }).then((response) => response.json() as Promise<{ data: unknown[]; drained: boolean }>);
    const segment = segmentSchema.parse(read.data[0]);
    expect(read.drained).toBe(true);
    expect(segment.tokens.slice(0, secondPrompt.length)).toEqual(secondPrompt);
    const secondOutput = harness.tokenizer.encodeText(
      'Done thinking.\n</think>\n\nThe file says hello.<|im_end|>',
    );
    expect(segment.extra_info.output_token_count).toBe(firstOutput.length + secondOutput.length);
    expect(segment.aligned_response_length).toBe(segment.extra_info.output_token_count);
    // The tool result is context (mask 0); the assistant's own tool-call text is trainable.
    expect(
      segment.full_loss_mask
        .slice(firstPrompt.length, firstPrompt.length + firstOutput.length)
        .every((value) => value === 1),
    ).toBe(true);
    expect(
      segment.full_loss_mask
        .slice(firstPrompt.length + firstOutput.length, secondPrompt.length)
        .every((value) => value === 0),
    ).toBe(true);
    expect(new Set(segment.full_versions)).toEqual(new Set(['-1', 'v1']));
  });

  it('streams content, reasoning and tool calls that the SDK reassembles', async () => {
    harness.engine.script = () => ({ text: toolCallOutput });
    const stream = await harness.openai.chat.completions.create(
      { model: 'qwen', messages: [{ role: 'user', content: 'read it' }], tools, stream: true },
      { headers: { 'X-Session-Id': 'agent-stream' } },
    );
    let reasoning = '';
    const names: string[] = [];
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (choice) {
        reasoning += (choice.delta as { reasoning_content?: string }).reasoning_content ?? '';
        for (const toolCall of choice.delta.tool_calls ?? [])
          if (toolCall.function?.name) names.push(toolCall.function.name);
        finish = choice.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(reasoning).toBe('The user wants the file.');
    expect(names).toEqual(['read_file']);
    expect(finish).toBe('tool_calls');
    expect(usage?.completion_tokens).toBe(harness.tokenizer.encodeText(toolCallOutput).length);
  });

  it('lists models through the router', async () => {
    const models = await harness.openai.models.list();
    expect(models.data.map((model) => model.id)).toEqual(['scripted-model']);
  });
});
