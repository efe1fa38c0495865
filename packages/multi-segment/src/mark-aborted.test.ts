import { createSample, SampleStatus } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { abortedTrajectoryId, markAbortedNoGrad } from './mark-aborted.js';

describe('markAbortedNoGrad', () => {
  it('turns the sample into a no-gradient placeholder without touching the input', () => {
    const input = createSample({
      index: 4,
      tokens: [5, 6, 7],
      response_length: 2,
      loss_mask: [1, 1],
      rollout_log_probs: [-1, -1],
      reward: 3,
      session_id: 's-1',
      metadata: { session_id: 's-1', instance_id: 'i-1' },
    });
    const before = structuredClone(input);
    const marked = markAbortedNoGrad(input);
    expect(input).toEqual(before);
    expect(marked).toMatchObject({
      remove_sample: true,
      status: SampleStatus.FAILED,
      reward: 0,
      tokens: [5, 6, 7],
      response_length: 0,
      loss_mask: [],
      rollout_log_probs: [],
      session_id: null,
    });
    expect(marked.metadata).toEqual({
      parent_traj_id: 's-1',
      instance_id: 'i-1',
      last_failed_session_id: 's-1',
    });
  });

  it('gives an empty sample one placeholder token', () => {
    expect(markAbortedNoGrad(createSample({ index: 1 })).tokens).toEqual([0]);
  });

  it('never overwrites existing ids', () => {
    const marked = markAbortedNoGrad(
      createSample({ metadata: { parent_traj_id: 'p', instance_id: 'i', session_id: 's-own' } }),
      { sessionId: 's-arg', instanceId: 'i-arg' },
    );
    expect(marked.metadata).toEqual({
      parent_traj_id: 'p',
      instance_id: 'i',
      last_failed_session_id: 's-arg',
    });
  });

  it('falls back: given session, own session, given instance, own instance', () => {
    expect(markAbortedNoGrad(createSample(), { sessionId: 's-arg', instanceId: 'i-arg' }).metadata).toEqual({
      parent_traj_id: 's-arg',
      instance_id: 'i-arg',
      last_failed_session_id: 's-arg',
    });
    expect(
      markAbortedNoGrad(createSample({ session_id: 's-own' }), { instanceId: 'i-arg' }).metadata,
    ).toEqual({
      parent_traj_id: 's-own',
      instance_id: 'i-arg',
      last_failed_session_id: 's-own',
    });
    expect(markAbortedNoGrad(createSample(), { instanceId: 'i-arg' }).metadata).toEqual({
      parent_traj_id: 'i-arg',
      instance_id: 'i-arg',
    });
    expect(markAbortedNoGrad(createSample({ metadata: { instance_id: 'i-own' } })).metadata).toEqual({
      parent_traj_id: 'i-own',
      instance_id: 'i-own',
    });
  });

  it('invents a reproducible id derived from the sample', () => {
    const sample = createSample({ index: 9, group_index: 2, prompt: 'p', label: 'l' });
    const first = markAbortedNoGrad(sample).metadata;
    const second = markAbortedNoGrad(structuredClone(sample)).metadata;
    expect(first.parent_traj_id).toMatch(/^aborted-[0-9a-f]{16}$/);
    expect(second.parent_traj_id).toBe(first.parent_traj_id);
    expect(first.instance_id).toBe(first.parent_traj_id);
    expect(abortedTrajectoryId({ ...sample, index: 10 })).not.toBe(first.parent_traj_id);
    // Property order does not matter.
    expect(abortedTrajectoryId({ label: 'l', prompt: 'p', index: 9, group_index: 2 })).toBe(
      first.parent_traj_id,
    );
  });
});
