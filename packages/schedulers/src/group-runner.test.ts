import { createSample, SampleStatus } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { routeGenerateByPath } from './generate.js';
import { defaultMarkAbortedNoGrad, incrementRetry, retryCountOf, sessionIdsOf } from './group-retry.js';
import { GroupRun, runGroup } from './group-runner.js';

describe('retry bookkeeping', () => {
  it('moves the session aside and counts the retry', () => {
    const sample = createSample({
      session_id: 'sess-1',
      remove_sample: true,
      metadata: {
        session_id: 'sess-1',
        parent_traj_id: 'sess-1',
        segment_index: 2,
        instance_id: 'i',
        dressage_retry_count: 1,
      },
    });
    const retried = incrementRetry(sample);
    expect(retried.session_id).toBeNull();
    expect(retried.remove_sample).toBe(false);
    expect(retried.metadata).toEqual({
      instance_id: 'i',
      dressage_retry_count: 2,
      last_retry_session_id: 'sess-1',
    });
    expect(sample.metadata.session_id).toBe('sess-1');
    expect(retryCountOf([retried])).toBe(2);
    expect(retryCountOf([])).toBe(0);
  });

  it('builds reproducible placeholders that fall back to the sample ids', () => {
    const bare = createSample({ index: 3, group_index: 1, prompt: 'x' });
    const first = defaultMarkAbortedNoGrad(bare, {});
    expect(first.metadata.parent_traj_id).toMatch(/^aborted-[0-9a-f]{16}$/);
    expect(defaultMarkAbortedNoGrad(bare, {}).metadata.parent_traj_id).toBe(first.metadata.parent_traj_id);
    expect(first).toMatchObject({ tokens: [0], status: SampleStatus.FAILED, remove_sample: true, reward: 0 });
    const withInstance = defaultMarkAbortedNoGrad(createSample({ metadata: { instance_id: 'inst' } }), {});
    expect(withInstance.metadata).toMatchObject({ parent_traj_id: 'inst', instance_id: 'inst' });
  });
});

describe('runGroup', () => {
  it('aborts the siblings of a failed sample and reports every session it touched', async () => {
    const seen: string[] = [];
    const outcome = await runGroup(
      [createSample({ index: 0 }), createSample({ index: 1 })],
      async (sample, _params, { signal }) => {
        sample.session_id = `s${sample.index}`;
        if (sample.index === 0) throw new Error('boom');
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        seen.push('aborted');
        return sample;
      },
      {},
      { rolloutId: 0, attempt: 0, mode: 'sync' },
      new AbortController().signal,
    );
    expect(outcome.failed).toBe(true);
    expect(outcome.cancelled).toBe(false);
    expect((outcome.error as Error).message).toBe('boom');
    expect(seen).toEqual(['aborted']);
    expect(sessionIdsOf(outcome).sort()).toEqual(['s0', 's1']);
  });

  it('shows the samples of finished calls while siblings still run, and each call as it settles', async () => {
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const events: string[] = [];
    const run = new GroupRun(
      [createSample({ index: 0 }), createSample({ index: 1 })],
      async (sample) => {
        if (sample.index === 1) await gate;
        return { ...sample, response: `r${sample.index}` };
      },
      {},
      { rolloutId: 0, attempt: 0, mode: 'fully-async' },
      new AbortController().signal,
      {
        started: () => events.push('started'),
        settled: (samples) => events.push(`settled ${samples?.map((sample) => sample.index).join()}`),
      },
    );
    await new Promise((resolve) => setImmediate(resolve));
    expect(run.finishedSamples().map((sample) => sample.response)).toEqual(['r0']);
    expect(events).toEqual(['started', 'started', 'settled 0']);
    release();
    const outcome = await run.done;
    expect(outcome.samples.map((sample) => sample.response)).toEqual(['r0', 'r1']);
    expect(events).toEqual(['started', 'started', 'settled 0', 'settled 1']);
  });

  it('flattens nested results', async () => {
    const outcome = await runGroup(
      [createSample({ index: 0 })],
      (sample) => [[sample, { ...sample, index: 9 }]],
      {},
      { rolloutId: 0, attempt: 0, mode: 'sync' },
      new AbortController().signal,
    );
    expect(outcome.samples.map((sample) => sample.index)).toEqual([0, 9]);
    expect(outcome.failed).toBe(false);
  });
});

describe('routeGenerateByPath', () => {
  it('sends samples to the generate function their record names', async () => {
    const generate = routeGenerateByPath(
      { 'agents.swe': (sample) => ({ ...sample, response: 'swe' }) },
      (sample) => ({ ...sample, response: 'default' }),
    );
    const context = { rolloutId: 0, attempt: 0, mode: 'sync' as const, signal: new AbortController().signal };
    const routed = await generate(createSample({ generate_function_path: 'agents.swe' }), {}, context);
    const plain = await generate(createSample(), {}, context);
    expect([(routed as { response: string }).response, (plain as { response: string }).response]).toEqual([
      'swe',
      'default',
    ]);
    expect(() => generate(createSample({ generate_function_path: 'agents.nope' }), {}, context)).toThrow(
      /no generate function registered for generate_function_path "agents.nope" \(known: agents.swe\)/,
    );
  });
});
