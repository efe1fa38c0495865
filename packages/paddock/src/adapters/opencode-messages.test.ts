import { describe, expect, it } from 'vitest';
import { opencodeMessageSchema, opencodeMessagesToChat } from './opencode-messages.js';

describe('opencode session messages', () => {
  it('become assistant replies with their tool calls and the calls results; user messages are skipped', () => {
    // The shape of opencode 1.18's `GET /session/{id}/message` (ids shortened, unread fields left out).
    const messages = [
      { info: { id: 'msg_1', role: 'user' }, parts: [{ type: 'text', text: 'list the files' }] },
      {
        info: { id: 'msg_2', role: 'assistant' },
        parts: [
          { type: 'step-start' },
          { type: 'reasoning', text: 'Use bash.' },
          {
            type: 'tool',
            id: 'prt_1',
            callID: 'call_1',
            tool: 'bash',
            state: { status: 'completed', input: { command: 'ls' }, output: 'a.txt\n' },
          },
          {
            type: 'tool',
            id: 'prt_2',
            callID: 'call_2',
            tool: 'read',
            state: { status: 'error', input: {}, error: 'no path' },
          },
          { type: 'step-finish', tokens: { input: 10 } },
        ],
      },
      { info: { id: 'msg_3', role: 'assistant' }, parts: [{ type: 'text', text: 'One file.' }] },
      { info: { id: 'msg_4', role: 'assistant' }, parts: [{ type: 'step-start' }] },
    ].map((message) => opencodeMessageSchema.parse(message));
    expect(opencodeMessagesToChat(messages)).toEqual([
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'Use bash.',
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'bash', arguments: '{"command":"ls"}' } },
          { id: 'call_2', type: 'function', function: { name: 'read', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', name: 'bash', content: 'a.txt\n' },
      { role: 'tool', tool_call_id: 'call_2', name: 'read', content: 'no path' },
      { role: 'assistant', content: 'One file.' },
    ]);
  });
});
