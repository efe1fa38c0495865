import { describe, expect, it } from 'vitest';
import { upstreamErrorCode, upstreamErrorMessage } from './upstream-errors.js';

describe('upstream error bodies', () => {
  it('reads the name and message of every envelope an upstream answers with', () => {
    const envelopes: [unknown, string | null, string][] = [
      [{ error: 'generation_preempted', message: 'weights moved' }, 'generation_preempted', 'weights moved'],
      [{ code: 'context_overflow', message: 'too long' }, 'context_overflow', 'too long'],
      [{ error: { code: 'rate_limited', message: 'slow down' } }, 'rate_limited', 'slow down'],
      [{ detail: { error: 'session_busy', message: 'one at a time' } }, 'session_busy', 'one at a time'],
      [{ error: 7, message: 3 }, null, '{"error":7,"message":3}'],
      ['plain text', null, 'plain text'],
    ];
    for (const [body, code, message] of envelopes) {
      expect(upstreamErrorCode(body)).toBe(code);
      expect(upstreamErrorMessage(body)).toBe(message);
    }
  });
});
