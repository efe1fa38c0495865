import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Tool } from '@dressage/protocol';
import { createChatTemplateRenderer, loadTokenizer } from '@dressage/tito';
import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { qwen35ChatTemplatePath, qwenModelDirectory, startHarness } from './__fixtures__/harness.js';
import { createProxyConfig, parseProxyArguments } from './config.js';
import { loadPromptRendering } from './prompt-tokenizer.js';

const packageRoot = fileURLToPath(new URL('..', import.meta.url));

const tools: Tool[] = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

// Runs the real CLI until it exits (a refusal) or prints that it listens.
function runCli(args: readonly string[]): Promise<{ code: number | null; output: string }> {
  const child = spawn(
    process.execPath,
    ['--conditions=@dressage/source', '--import', 'tsx', 'src/bin/dressage-proxy.ts', ...args],
    { cwd: packageRoot, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return new Promise((resolve) => {
    let output = '';
    const onData = (data: Buffer) => {
      output += data.toString();
      if (output.includes('listening on')) child.kill('SIGKILL');
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => resolve({ code, output }));
  });
}

const cliBase = [
  '--tokenizer-path',
  qwenModelDirectory,
  '--port',
  '0',
  '--host',
  '127.0.0.1',
  '--store-dir',
  'none',
];

describe('the template in force', () => {
  it('parses --chat-template', () => {
    const parsed = parseProxyArguments(['--tokenizer-path', 'm', '--chat-template', '/t.jinja'], {});
    expect(parsed.help === false && parsed.config.chatTemplate).toBe('/t.jinja');
    const plain = parseProxyArguments(['--tokenizer-path', 'm', '--token-build-model', 'qwen3'], {});
    expect(plain.help === false && [plain.config.chatTemplate, plain.config.modelToolCallType]).toEqual([
      null,
      'qwen3',
    ]);
    expect(() => parseProxyArguments(['--tokenizer-path', 'm', '--chat-template', ''], {})).toThrow(
      /--chat-template/,
    );
  });

  it('refuses to start when --token-build-model cannot reproduce it, naming model, template and text', async () => {
    // The Qwen3 directory's template writes JSON calls; the default qwen3_5 family writes XML.
    const refused = await runCli(cliBase);
    expect(refused.code).toBe(2);
    expect(refused.output).toContain('--token-build-model qwen3_5 cannot render the prompts');
    expect(refused.output).toContain(`the chat template of the model directory ${qwenModelDirectory}`);
    expect(refused.output).toMatch(/the template renders ".+" where the renderer writes ".+"/);
    // A template in the family's format starts.
    expect((await runCli([...cliBase, '--chat-template', qwen35ChatTemplatePath])).output).toContain(
      'listening on',
    );
  }, 120_000);

  it('refuses in snapshot mode too (the family also names the tool-call format), and a missing file', async () => {
    const config = { tokenizerPath: qwenModelDirectory, tokenBuildMode: 'snapshot' as const };
    await expect(loadPromptRendering(createProxyConfig(config))).rejects.toMatchObject({
      code: 'failed_precondition',
      message: expect.stringContaining('--token-build-model qwen3_5 cannot render the prompts'),
      details: expect.objectContaining({ model: 'qwen3_5', renderer: 'qwen3_5' }),
    });
    await expect(
      loadPromptRendering(createProxyConfig({ ...config, tokenBuildModel: 'qwen3' })),
    ).resolves.toBeDefined();
    await expect(
      loadPromptRendering(
        createProxyConfig({ ...config, chatTemplate: `${qwen35ChatTemplatePath}.missing` }),
      ),
    ).rejects.toMatchObject({
      code: 'not_found',
      message: expect.stringContaining('Cannot read the chat template'),
    });
  });

  it("renders the same prompt in TITO and snapshot mode, the template's own", async () => {
    const template = createChatTemplateRenderer(readFileSync(qwen35ChatTemplatePath, 'utf8'));
    const messages = [
      { role: 'system' as const, content: 'You are careful.' },
      { role: 'user' as const, content: 'Read a.txt' },
    ];
    const expected = template.render(messages, { tools, addGenerationPrompt: true });
    expect(expected).toContain('You have access to the following functions');
    for (const tokenBuildMode of ['tito', 'snapshot'] as const) {
      const { renderer } = await loadPromptRendering(
        createProxyConfig({
          tokenizerPath: qwenModelDirectory,
          chatTemplate: qwen35ChatTemplatePath,
          tokenBuildMode,
        }),
      );
      expect(renderer.render(messages, { tools, addGenerationPrompt: true }), tokenBuildMode).toBe(expected);
    }
  });

  it("sends the engine the ids of the template's text, in both modes", async () => {
    const tokenizer = await loadTokenizer(qwenModelDirectory);
    const official = createChatTemplateRenderer(tokenizer.chatTemplate!);
    for (const tokenBuildMode of ['tito', 'snapshot'] as const) {
      const harness = await startHarness({
        tokenizer: 'qwen',
        config: { chatTemplate: null, tokenBuildModel: 'qwen3', tokenBuildMode },
      });
      try {
        harness.engine.script = (_request, index) =>
          index === 0
            ? {
                text: '<think>\n\n</think>\n\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call><|im_end|>',
              }
            : { text: '<think>\n\n</think>\n\nIt says hello.<|im_end|>' };
        const session = { headers: { 'X-Session-Id': `s-${tokenBuildMode}`, 'X-Instance-Id': 'g' } };
        const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
          { role: 'user', content: 'What is in a.txt?' },
        ];
        const first = await harness.openai.chat.completions.create(
          { model: 'qwen', messages, tools: tools as OpenAI.Chat.Completions.ChatCompletionTool[] },
          session,
        );
        const call = first.choices[0]!.message.tool_calls![0]!;
        expect(call.type === 'function' && call.function).toEqual({
          name: 'read_file',
          arguments: '{"path": "a.txt"}',
        });
        messages.push(first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: 'hello' });
        await harness.openai.chat.completions.create(
          { model: 'qwen', messages, tools: tools as OpenAI.Chat.Completions.ChatCompletionTool[] },
          session,
        );
        const [firstPrompt, secondPrompt] = harness.engine.requests.map((request) =>
          tokenizer.decode(request.body.input_ids),
        );
        expect(firstPrompt, tokenBuildMode).toBe(
          official.render(messages.slice(0, 1) as never, {
            tools: tools as never,
            addGenerationPrompt: true,
          }),
        );
        expect(firstPrompt).toContain('You may call one or more functions to assist with the user query.');
        // The second prompt ends with the template's tool-result wrapping and generation prompt.
        expect(
          secondPrompt!.endsWith(
            '<|im_start|>user\n<tool_response>\nhello\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
          ),
        ).toBe(true);
      } finally {
        await harness.close();
      }
    }
  });
});
