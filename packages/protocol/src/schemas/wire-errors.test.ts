import { describe, expect, it } from 'vitest';
import {
  contextOverflowBody,
  contextOverflowBodySchema,
  detailErrorBodySchema,
  proxyErrorDetailSchema,
  streamErrorFrameSchema,
  toStreamErrorFrame,
} from './wire-errors.js';

const overflowDetails = {
  phase: 'input_output' as const,
  context_window: 4096,
  input_tokens: 4090,
  output_tokens: 0,
  total_tokens: 4090,
  max_tokens: null,
  session_id: 's1',
  turn_id: 't3',
  last_proxy_step_recorded: false,
};

describe('proxy error bodies', () => {
  it('accepts the detail envelope with a string or an object', () => {
    expect(detailErrorBodySchema.parse({ detail: 'Unauthorized' }).detail).toBe('Unauthorized');
    expect(detailErrorBodySchema.parse({ detail: { error: 'proxy_shutting_down' } }).detail).toEqual({
      error: 'proxy_shutting_down',
    });
    expect(detailErrorBodySchema.safeParse({ error: 'x' }).success).toBe(false);
  });

  it('builds the top-level context overflow body', () => {
    const body = contextOverflowBody(overflowDetails);
    expect(body).toEqual({
      error: 'context_overflow',
      message: 'Dressage proxy context window overflow.',
      details: overflowDetails,
    });
    expect(contextOverflowBodySchema.parse(body).details.phase).toBe('input_output');
    const bad = contextOverflowBodySchema.safeParse({
      ...body,
      details: { ...overflowDetails, phase: 'output' },
    });
    expect(bad.error?.issues[0]?.path).toEqual(['details', 'phase']);
  });

  it('discriminates the structured 502 details', () => {
    const staleness = proxyErrorDetailSchema.parse({
      error: 'partial_rollout_staleness_exceeded',
      message: 'too many switches',
      versions: ['v1', 'v2', 'v3'],
      version_span: 3,
      version_switches: 2,
      max_preempts: 1,
      max_version_span: 2,
      session_id: 's',
      instance_id: 'i',
    });
    expect(staleness.error).toBe('partial_rollout_staleness_exceeded');
    expect(
      proxyErrorDetailSchema.safeParse({ error: 'weight_version_mismatch', expected: '3', observed: '4' })
        .success,
    ).toBe(true);
    expect(
      proxyErrorDetailSchema.safeParse({ error: 'tool_call_hook_failed', stage: 'during', message: 'm' })
        .success,
    ).toBe(false);
    expect(proxyErrorDetailSchema.safeParse({ error: 'made_up' }).success).toBe(false);
  });
});

describe('stream error frames', () => {
  it('keeps the payload fields and takes the code from error for detail objects', () => {
    const frame = toStreamErrorFrame(502, {
      detail: { error: 'generation_preempted', message: 'preempted by pause', session_id: 's1' },
    });
    expect(frame).toEqual({
      error: {
        error: 'generation_preempted',
        session_id: 's1',
        type: 'dressage_proxy_error',
        code: 'generation_preempted',
        message: 'preempted by pause',
        status_code: 502,
      },
    });
    expect(streamErrorFrameSchema.parse(frame).error.status_code).toBe(502);
  });

  it('converts the top-level context overflow body', () => {
    const frame = toStreamErrorFrame(413, contextOverflowBody(overflowDetails));
    expect(frame.error.code).toBe('context_overflow');
    expect(frame.error.message).toBe('Dressage proxy context window overflow.');
    expect(frame.error.details).toEqual(overflowDetails);
    expect(frame.error.status_code).toBe(413);
  });

  it('falls back to http_error and the string detail', () => {
    expect(toStreamErrorFrame(400, { detail: 'turn_id is required' }).error).toEqual({
      type: 'dressage_proxy_error',
      code: 'http_error',
      message: 'turn_id is required',
      status_code: 400,
    });
    expect(toStreamErrorFrame(500, null).error.message).toBe('HTTP 500');
    expect(toStreamErrorFrame(500, { code: 'internal_error', message: 'boom' }).error.code).toBe(
      'internal_error',
    );
  });
});
