import { describe, expect, it } from 'vitest';
import { ClaudeCodeAdapter, claudeFailure } from './claude-code.js';
import { streamJsonResult } from './stream-json.js';

const result = (fields: Record<string, unknown>) => JSON.stringify({ type: 'result', ...fields });

describe('claude_code failure signals', () => {
  it('reads the last result event of a stream-json run', () => {
    const stdout = [
      '{"type":"system","subtype":"init"}',
      result({ subtype: 'success', is_error: false, result: 'first' }),
      result({ subtype: 'error_max_turns', is_error: true, num_turns: 3 }),
      '{"type":"result","subtype":"succ',
    ].join('\n');
    expect(streamJsonResult(stdout)).toMatchObject({ subtype: 'error_max_turns', num_turns: 3 });
  });

  it('maps its own limits and errors onto the turn error table', () => {
    expect(claudeFailure({ type: 'result', subtype: 'success', is_error: false }, 20)).toBeNull();
    expect(
      claudeFailure({ type: 'result', subtype: 'error_max_turns', is_error: true, num_turns: 20 }, 20),
    ).toMatchObject({
      error: 'max_steps_exceeded',
      httpStatus: 429,
      details: { max_turns: 20, num_turns: 20 },
    });
    expect(
      claudeFailure({ type: 'result', subtype: 'success', is_error: true, result: 'Prompt is too long' }, 20),
    ).toMatchObject({ error: 'context_overflow', httpStatus: 413 });
    expect(
      claudeFailure(
        { type: 'result', subtype: 'success', is_error: true, result: 'API Error: 500 upstream' },
        20,
      ),
    ).toMatchObject({ error: 'backend_error', httpStatus: 502 });
  });

  it('allows tools without asking only inside a sandbox, and denies subagents', () => {
    const adapter = new ClaudeCodeAdapter({});
    expect(adapter.settings(true)).toMatchObject({
      permissions: { allow: expect.arrayContaining(['Bash(*)', 'Write(*)']), deny: ['Task', 'Agent'] },
    });
    expect(adapter.settings(false)).toMatchObject({ permissions: { allow: [] } });
  });

  it('refuses unknown backend options', () => {
    expect(() => new ClaudeCodeAdapter({ executable: '/bin/sh' })).toThrow(/Invalid claude_code/);
  });
});
