import { describe, expect, it } from 'vitest';
import { streamJsonResult, streamJsonToChat } from './stream-json.js';

const line = (event: unknown) => JSON.stringify(event);

describe('stream-json runs', () => {
  const stdout = [
    line({ type: 'system', subtype: 'init', tools: ['Bash'] }),
    line({
      type: 'assistant',
      message: {
        content: [
          { type: 'thinking', thinking: 'List first.' },
          { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'ls' } },
        ],
      },
    }),
    line({
      type: 'user',
      message: { content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'a.txt' }] },
    }),
    line({ type: 'assistant', message: { content: [{ type: 'text', text: 'One file.' }] } }),
    line({ type: 'result', subtype: 'success', is_error: false, result: 'One file.', num_turns: 2 }),
    '{"type":"assistant","message":{"content":[{"type":"te',
  ].join('\n');

  it('turns assistant and tool_result events into chat messages and keeps the final result', () => {
    expect(streamJsonToChat(stdout)).toEqual({
      outputs: [
        {
          role: 'assistant',
          content: '',
          reasoning_content: 'List first.',
          tool_calls: [
            { id: 'toolu_1', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'a.txt' },
        { role: 'assistant', content: 'One file.' },
      ],
      result: 'One file.',
    });
  });

  it('finds the result event and none in a run that printed none', () => {
    expect(streamJsonResult(stdout)).toMatchObject({ type: 'result', subtype: 'success', num_turns: 2 });
    expect(streamJsonResult(line({ type: 'system', subtype: 'init' }))).toBeNull();
  });
});
