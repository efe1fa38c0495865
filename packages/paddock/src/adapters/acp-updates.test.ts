import { describe, expect, it } from 'vitest';
import { acpSessionUpdateSchema, acpUpdatesToChat } from './acp-updates.js';

describe('ACP session updates', () => {
  it('become an assistant message with its tool calls, their results, then the final reply', () => {
    // The updates qwen-code 0.24.4 sends for one shell call and a final answer (usage chunks empty).
    const updates = [
      { sessionUpdate: 'agent_thought_chunk', content: { type: 'text', text: 'Run it.' } },
      {
        sessionUpdate: 'tool_call',
        toolCallId: 'call_0',
        status: 'pending',
        title: 'Shell',
        rawInput: {},
        _meta: { toolName: 'run_shell_command' },
      },
      { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: '' } },
      {
        sessionUpdate: 'tool_call_update',
        toolCallId: 'call_0',
        status: 'in_progress',
        rawInput: { command: 'echo hi' },
      },
      {
        sessionUpdate: 'tool_call_update',
        toolCallId: 'call_0',
        status: 'completed',
        content: [{ type: 'content', content: { type: 'text', text: 'Output: hi' } }],
      },
      { sessionUpdate: 'available_commands_update', availableCommands: [] },
      { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'Do' } },
      { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'ne.' } },
    ];
    expect(acpUpdatesToChat(updates.map((update) => acpSessionUpdateSchema.parse(update)))).toEqual([
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'Run it.',
        tool_calls: [
          {
            id: 'call_0',
            type: 'function',
            function: { name: 'run_shell_command', arguments: '{"command":"echo hi"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: 'call_0', content: 'Output: hi' },
      { role: 'assistant', content: 'Done.' },
    ]);
  });
});
