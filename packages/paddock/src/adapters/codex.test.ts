import { describe, expect, it } from 'vitest';
import { codexConfig, codexFailure, codexOptionsSchema } from './codex.js';
import { codexEventsToChat } from './codex-events.js';

describe('codex adapter', () => {
  it('turns exec --json events into tool calls, tool results and replies', () => {
    const stdout = [
      '{"type":"thread.started","thread_id":"th-1"}',
      '{"type":"item.completed","item":{"id":"i0","type":"reasoning","text":"Use the shell."}}',
      '{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"echo hi","aggregated_output":"hi\\n","exit_code":0}}',
      '{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"Done."}}',
      '{"type":"turn.completed","usage":{"input_tokens":10}}',
    ].join('\n');
    expect(codexEventsToChat(stdout)).toEqual({
      threadId: 'th-1',
      error: null,
      outputs: [
        {
          role: 'assistant',
          content: '',
          reasoning_content: 'Use the shell.',
          tool_calls: [
            { id: 'i1', type: 'function', function: { name: 'shell', arguments: '{"command":"echo hi"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'i1', content: 'hi\n' },
        { role: 'assistant', content: 'Done.' },
      ],
    });
    expect(codexEventsToChat('{"type":"turn.failed","error":{"message":"boom"}}').error).toBe('boom');
  });

  it('maps its failure messages onto the turn error table', () => {
    expect(codexFailure('exceeded the context window of the model')).toMatchObject({ httpStatus: 413 });
    expect(codexFailure('Turn exceeded max_steps.')).toMatchObject({ httpStatus: 429 });
    expect(codexFailure('stream disconnected')).toMatchObject({ httpStatus: 502 });
  });

  it('runs commands without asking only inside a sandbox, and never retries a model request', () => {
    const options = codexOptionsSchema.parse({});
    const context = { proxyOrigin: 'http://127.0.0.1:9', apiPath: '/v1', systemPrompt: null };
    const inside = codexConfig(options, { ...context, insideSandbox: true });
    expect(inside).toContain('approval_policy = "never"');
    expect(inside).toContain('sandbox_mode = "danger-full-access"');
    expect(inside).toContain('base_url = "http://127.0.0.1:9/v1"');
    expect(inside).toContain('request_max_retries = 0');
    const outside = codexConfig(options, { ...context, insideSandbox: false });
    expect(outside).toContain('approval_policy = "untrusted"');
    expect(outside).toContain('sandbox_mode = "read-only"');
  });
});
