import { describe, expect, it } from 'vitest';
import { responsesRequestToChat } from './bridges.js';

describe('Responses bridge', () => {
  it('gives a re-sent reasoning item back to the assistant turn that follows it', () => {
    const chat = responsesRequestToChat({
      model: 'm',
      input: [
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'write it' }] },
        { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'The shell writes it.' }] },
        { type: 'function_call', call_id: 'c1', name: 'exec_command', arguments: '{"cmd":"echo"}' },
        { type: 'function_call_output', call_id: 'c1', output: 'ok' },
        { type: 'reasoning', id: 'rs_2', summary: [{ type: 'summary_text', text: 'Done.' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Written.' }] },
      ],
    });
    expect(chat.messages).toEqual([
      { role: 'user', content: 'write it' },
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'The shell writes it.',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'exec_command', arguments: '{"cmd":"echo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'ok' },
      { role: 'assistant', content: 'Written.', reasoning_content: 'Done.' },
    ]);
  });
});
