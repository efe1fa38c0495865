import { proxyErrorDetailSchema } from '@dressage/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeCharacters } from './__fixtures__/fake-tokenizer.js';
import { type Harness, startHarness } from './__fixtures__/harness.js';

let harness: Harness;
afterEach(async () => {
  await harness?.close();
});

const prompt = [{ role: 'user', content: 'hi' }];
const P = '<user>hi<assistant>'.length;

function chat(
  headers: Record<string, string> = { 'x-session-id': 's' },
  extra: Record<string, unknown> = {},
) {
  return harness.call('POST', '/v1/chat/completions', { messages: prompt, ...extra }, headers);
}

describe('pause and resume (§1.5)', () => {
  it('partial rollout: a pause mid-generation, then resume, gives one response with two versions', async () => {
    harness = await startHarness({ config: { partialRollout: true, recordTokenVersions: true } });
    harness.engine.script = (_request, index) =>
      index === 0 ? { text: 'abcdefghijklmnopqrstuvwxyz', tokenDelayMs: 10 } : { text: 'XYZ' };
    const call = chat();
    await harness.engine.waitForTokens(2);
    const paused = await harness.call('POST', '/v1/rollout/pause', {
      reason: 'weight_update',
      timeout_seconds: 10,
    });
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({
      status: 'paused',
      mode: 'preempt',
      quiesced: true,
      preempted: true,
      fallback: null,
    });
    expect(paused.body.abort_succeeded_request_ids).toEqual(paused.body.abort_attempted_request_ids);
    expect(harness.engine.aborts).toEqual(paused.body.preempted_request_ids);
    const state = await harness.call('GET', '/v1/rollout/pause_state');
    expect(state.body).toMatchObject({
      paused: true,
      partial_rollout: true,
      active_sglang_generations: 0,
      suspended_generations: 1,
    });
    harness.engine.version = 'v2';
    const resumed = await harness.call('POST', '/v1/rollout/resume', { version: 'v2' });
    expect(resumed.body).toMatchObject({ status: 'resumed', version: 'v2', rollout_epoch: 1 });

    const response = await call;
    expect(response.status).toBe(200);
    const continuation = harness.engine.requests[1]!.body;
    const partialIds = continuation.input_ids.slice(P);
    expect(partialIds.length).toBeGreaterThanOrEqual(2);
    expect(decodeCharacters(continuation.input_ids.slice(0, P))).toBe('<user>hi<assistant>');
    const partialText = decodeCharacters(partialIds);
    expect('abcdefghijklmnopqrstuvwxyz'.startsWith(partialText)).toBe(true);
    expect(response.body.choices[0].message.content).toBe(`${partialText}XYZ`);
    expect(response.body.usage.completion_tokens).toBe(partialIds.length + 3);

    await harness.call('POST', '/session/finalize', { session_id: 's' });
    const read = await harness.call('POST', '/trajectory/read', { trajectory_id: 's' });
    const [segment] = read.body.data;
    const responseVersions = segment.full_versions.filter(
      (_: string, index: number) => segment.full_loss_mask[index] === 1,
    );
    expect(responseVersions).toEqual([...partialIds.map(() => 'v1'), 'v2', 'v2', 'v2']);
  });

  it('partial rollout: the token budget is cumulative across chunks (cw = P+3 → 2 then 1)', async () => {
    harness = await startHarness({ config: { partialRollout: true, contextWindow: P + 3 } });
    harness.engine.script = (_request, index) =>
      index === 0 ? { text: 'abcdef', tokenDelayMs: 150 } : { text: 'z' };
    const call = chat();
    await harness.engine.waitForTokens(1);
    await harness.call('POST', '/v1/rollout/pause', {});
    await harness.call('POST', '/v1/rollout/resume', {});
    const response = await call;
    expect(response.status).toBe(200);
    const limits = harness.engine.requests.map((request) => request.body.sampling_params.max_new_tokens);
    const firstChunk = harness.engine.requests[1]!.body.input_ids.length - P;
    expect(limits).toEqual([2, 2 - firstChunk]);
  });

  it('non-partial: a preempted call is a 502 generation_preempted; the next step sees the epoch change', async () => {
    harness = await startHarness();
    harness.engine.script = (_request, index) =>
      index === 1 ? { text: 'abcdefghij', tokenDelayMs: 5 } : { text: 'ok' };
    expect((await chat()).status).toBe(200);
    const call = chat();
    await harness.engine.waitForTokens(1);
    await harness.call('POST', '/v1/rollout/pause', {});
    const preempted = await call;
    expect(preempted.status).toBe(502);
    expect(proxyErrorDetailSchema.parse(preempted.body.detail)).toMatchObject({
      error: 'generation_preempted',
      session_id: 's',
    });
    await harness.call('POST', '/v1/rollout/resume', {});
    const stale = await chat();
    expect(stale.status).toBe(502);
    expect(stale.body.detail).toMatchObject({
      error: 'trajectory_version_changed',
      session_epoch: 0,
      current_epoch: 1,
    });
    expect(harness.engine.requests).toHaveLength(2);
    // A new session binds to the new epoch.
    expect((await chat({ 'x-session-id': 'fresh' })).status).toBe(200);
  });

  it('an abort the engine sent itself (slime pausing it) is a preemption in both modes, and counted', async () => {
    for (const partialRollout of [false, true]) {
      if (partialRollout) await harness.close();
      harness = await startHarness({ config: { partialRollout, recordTokenVersions: true } });
      harness.engine.script = (_request, index) =>
        index === 0
          ? { text: 'ab', finish: 'abort', finishMessage: 'Abort by pause_generation', version: 'v1' }
          : { text: 'cd', version: 'v2' };
      const response = await chat();
      // No pause of this proxy: nothing aborted by it, yet the chunk is preempted.
      expect(harness.engine.aborts).toEqual([]);
      const state = await harness.call('GET', '/v1/rollout/pause_state');
      expect(state.body).toMatchObject({ paused: false, preempted_chunks: 1, unrequested_preemptions: 1 });
      if (!partialRollout) {
        expect(response.status).toBe(502);
        expect(proxyErrorDetailSchema.parse(response.body.detail)).toMatchObject({
          error: 'generation_preempted',
          session_id: 's',
        });
        expect(harness.engine.requests).toHaveLength(1);
        continue;
      }
      expect(response.status).toBe(200);
      expect(response.body.choices[0].message.content).toBe('abcd');
      expect(harness.engine.requests).toHaveLength(2);
      expect(decodeCharacters(harness.engine.requests[1]!.body.input_ids)).toBe('<user>hi<assistant>ab');
    }
  });

  it('a request that ended on its own while the pause aborted it is not continued', async () => {
    // The pause targets every request in flight, but one may reach its stop token before the
    // abort lands: the engine then answers `stop`, and that answer is the truth (the reference
    // judges a chunk by its finish reason). Continuing it would append a second answer after the
    // end-of-turn token.
    harness = await startHarness({ config: { partialRollout: true, recordTokenVersions: true } });
    harness.engine.script = () => ({ text: 'abcdef', tokenDelayMs: 20, ignoreAbort: true });
    const call = chat();
    await harness.engine.waitForTokens(2);
    const paused = await harness.call('POST', '/v1/rollout/pause', {
      reason: 'weight_update',
      timeout_seconds: 10,
    });
    expect(paused.body).toMatchObject({ status: 'paused', quiesced: true, preempted: false });
    expect(harness.engine.aborts).toHaveLength(1);
    harness.engine.version = 'v2';
    await harness.call('POST', '/v1/rollout/resume', { version: 'v2' });
    const response = await call;
    expect(response.status).toBe(200);
    expect(response.body.choices[0].message.content).toBe('abcdef');
    expect(response.body.choices[0].finish_reason).toBe('stop');
    expect(harness.engine.requests).toHaveLength(1);
    const state = await harness.call('GET', '/v1/rollout/pause_state');
    expect(state.body).toMatchObject({ preempted_chunks: 0, unrequested_preemptions: 0 });
  });

  it('engine aborts at v1, v2, then stop at v3 with N=1 → 502 staleness after 3 engine calls', async () => {
    harness = await startHarness({ config: { partialRollout: true, maxPartialRolloutPreempts: 1 } });
    const versions = ['v1', 'v2', 'v3'];
    harness.engine.script = (_request, index) =>
      index < 2 ? { text: 'ab', finish: 'abort', version: versions[index] } : { text: 'end', version: 'v3' };
    const response = await chat();
    expect(response.status).toBe(502);
    expect(proxyErrorDetailSchema.parse(response.body.detail)).toMatchObject({
      error: 'partial_rollout_staleness_exceeded',
      versions: ['v1', 'v2', 'v3'],
      version_switches: 2,
      max_preempts: 1,
    });
    expect(harness.engine.requests).toHaveLength(3);
    expect((await harness.call('GET', '/v1/rollout/pause_state')).body.unrequested_preemptions).toBe(2);
    expect((await harness.call('POST', '/session/finalize', { session_id: 's' })).body).toEqual({
      detail: 'Session has no turns',
    });
  });

  it('within the preempt budget an engine abort keeps the step with both versions', async () => {
    harness = await startHarness({
      config: { partialRollout: true, maxPartialRolloutPreempts: 1, recordTokenVersions: true },
    });
    harness.engine.script = (_request, index) =>
      index === 0 ? { text: 'ab', finish: 'abort', version: 'v1' } : { text: 'cde', version: 'v2' };
    const response = await chat();
    expect(response.status).toBe(200);
    expect(harness.engine.requests).toHaveLength(2);
    await harness.call('POST', '/session/finalize', { session_id: 's' });
    const read = await harness.call('POST', '/trajectory/read', { trajectory_id: 's' });
    const [segment] = read.body.data;
    const responseVersions = segment.full_versions.filter(
      (_: string, index: number) => segment.full_loss_mask[index] === 1,
    );
    expect(responseVersions).toEqual(['v1', 'v1', 'v2', 'v2', 'v2']);
  });

  it('partial staleness: v1 abort, v2 abort, v3 stop with N=1 → 502 after 3 engine calls, 0 steps', async () => {
    harness = await startHarness({ config: { partialRollout: true, maxPartialRolloutPreempts: 1 } });
    const versions = ['v1', 'v2', 'v3'];
    harness.engine.script = (_request, index) =>
      index < 2
        ? { text: 'abcdefghijklmnop', tokenDelayMs: 5, version: versions[index] }
        : { text: 'end', version: 'v3' };
    const call = chat();
    for (let cycle = 0; cycle < 2; cycle++) {
      await harness.engine.waitForTokens(1);
      await harness.call('POST', '/v1/rollout/pause', {});
      await harness.call('POST', '/v1/rollout/resume', {});
    }
    const response = await call;
    expect(response.status).toBe(502);
    expect(response.body.detail).toMatchObject({
      error: 'partial_rollout_staleness_exceeded',
      versions: ['v1', 'v2', 'v3'],
      version_span: 3,
      version_switches: 2,
      max_preempts: 1,
      max_version_span: 2,
    });
    expect(harness.engine.requests).toHaveLength(3);
    expect((await harness.call('POST', '/session/finalize', { session_id: 's' })).body).toEqual({
      detail: 'Session has no turns',
    });
  });

  it('calls that arrive while paused wait for resume', async () => {
    harness = await startHarness();
    await harness.call('POST', '/v1/rollout/pause', {});
    const again = await harness.call('POST', '/v1/rollout/pause', {});
    expect(again.body.status).toBe('already_paused');
    const call = chat();
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(harness.engine.requests).toHaveLength(0);
    await harness.call('POST', '/v1/rollout/resume', {});
    expect((await call).status).toBe(200);
    expect(harness.engine.requests).toHaveLength(1);
    const running = await harness.call('POST', '/v1/rollout/resume', {});
    expect(running.body.status).toBe('already_running');
  });

  it('resume waits for a healthy worker and answers 503 backend_not_ready otherwise', async () => {
    harness = await startHarness();
    harness.engine.healthy = false;
    await harness.call('POST', '/v1/rollout/pause', {});
    const notReady = await harness.call('POST', '/v1/rollout/resume', {});
    expect(notReady.status).toBe(503);
    expect(notReady.body.detail).toMatchObject({ status: 'backend_not_ready', paused: true });
    harness.engine.healthy = true;
    const ready = await harness.call('POST', '/v1/rollout/resume', {});
    expect(ready.body).toMatchObject({ status: 'resumed', rollout_epoch: 1, readiness: { ready: true } });
  });

  it('only preempt mode is accepted', async () => {
    harness = await startHarness();
    const response = await harness.call('POST', '/v1/rollout/pause', { mode: 'retract' });
    expect(response.status).toBe(400);
    expect(response.body.detail).toMatch(/mode/);
  });
});

describe('weight versions (§1.5)', () => {
  it('the expected-version pin: mismatch and unavailable', async () => {
    harness = await startHarness();
    harness.engine.version = 'v2';
    const mismatch = await chat({ 'x-session-id': 'a', 'x-dressage-expected-version': 'v1' });
    expect(mismatch.status).toBe(502);
    expect(mismatch.body.detail).toMatchObject({
      error: 'weight_version_mismatch',
      expected: 'v1',
      observed: 'v2',
    });
    harness.engine.version = null;
    const unavailable = await chat({ 'x-session-id': 'b', 'x-dressage-expected-version': 'v1' });
    expect(unavailable.body.detail).toMatchObject({ error: 'weight_version_unavailable' });
    harness.engine.version = 'v1';
    expect((await chat({ 'x-session-id': 'c', 'x-dressage-expected-version': 'v1' })).status).toBe(200);
  });

  it('non-partial: a step at a new version is refused after generation, and before it once observed', async () => {
    harness = await startHarness();
    expect((await chat()).status).toBe(200);
    harness.engine.version = 'v2';
    const changed = await chat();
    expect(changed.status).toBe(502);
    expect(changed.body.detail).toMatchObject({
      error: 'trajectory_version_changed',
      previous_versions: ['v1'],
      new_versions: ['v2'],
      session_id: 's',
    });
    const before = harness.engine.requests.length;
    // The controller now knows v2: the pre-check refuses without calling the engine.
    expect((await chat()).status).toBe(502);
    expect(harness.engine.requests).toHaveLength(before);
  });

  it('stamps "unknown" when the engine reports no version, and capabilities read worker versions', async () => {
    harness = await startHarness({ config: { recordTokenVersions: true } });
    harness.engine.version = null;
    await chat();
    await harness.call('POST', '/session/finalize', { session_id: 's' });
    const read = await harness.call('POST', '/trajectory/read', { trajectory_id: 's' });
    expect(read.body.data[0].full_versions.at(-1)).toBe('unknown');
    harness.engine.version = 'v7';
    const capabilities = await harness.call('GET', '/integration/capabilities');
    expect(capabilities.body).toMatchObject({
      schema_version: 'dressage.proxy.integration/v1',
      token_build_mode: 'tito',
      current_weight_version: 'v7',
      weight_version_source: 'worker_snapshot',
      weight_versions_consistent: true,
      weight_version_worker_count: 1,
      supports_expected_version: true,
    });
    expect((await harness.call('GET', '/v1/rollout/pause_state')).body.version).toBe('v7');
  });
});
