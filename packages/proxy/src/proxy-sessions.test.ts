import { segmentSchema } from '@dressage/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeCharacters } from './__fixtures__/fake-tokenizer.js';
import { type Harness, startHarness } from './__fixtures__/harness.js';
import { ProxyClient } from './proxy-client.js';

let harness: Harness;
afterEach(async () => {
  await harness?.close();
});

const user = (content: string) => ({ role: 'user', content });
const assistant = (content: string) => ({ role: 'assistant', content });

async function chat(
  messages: unknown[],
  headers: Record<string, string>,
  extra: Record<string, unknown> = {},
) {
  return harness.call('POST', '/v1/chat/completions', { model: 'm', messages, ...extra }, headers);
}

describe('sessions, lineages and finalize views (fake tokenizer)', () => {
  it('builds the lineage example of §1.10 in TITO mode', async () => {
    harness = await startHarness({ config: { recordTokenVersions: true } });
    const replies = ['hello', 'follow'];
    harness.engine.script = (_request, index) => ({ text: replies[index] });
    const first = await chat([user('hi')], { 'x-session-id': 's1', 'x-instance-id': 'i1' });
    expect(first.status).toBe(200);
    expect(first.body.choices[0].message.content).toBe('hello');
    expect(first.body.usage).toEqual({ prompt_tokens: 19, completion_tokens: 5, total_tokens: 24 });
    const second = await chat([user('hi'), assistant('hello'), user('again')], { 'x-session-id': 's1' });
    expect(second.status).toBe(200);
    // The second prompt is the first prompt + output + only the appended delta.
    expect(decodeCharacters(harness.engine.requests[1]!.body.input_ids)).toBe(
      '<user>hi<assistant>hello<user>again<assistant>',
    );
    expect(harness.engine.requests[1]!.body.logprob_start_len).toBe(-1);
    expect(harness.engine.requests[1]!.headers['x-smg-routing-key']).toBe('s1');

    const finalized = await harness.call('POST', '/session/finalize', { session_id: 's1' });
    expect(finalized.status).toBe(200);
    expect(finalized.body).toMatchObject({
      success: true,
      session_id: 's1',
      trajectory_id: 's1',
      instance_id: 'i1',
      num_steps: 2,
      num_turns: 1,
      num_segments: 1,
      num_timeline_segments: 2,
      history_rewritten: false,
      token_build_mode: 'tito',
    });
    const read = await harness.call('POST', '/trajectory/read', { trajectory_id: 's1' });
    expect(read.body.mode).toBe('trajectory');
    expect(read.body.success).toBe(true);
    const [segment] = read.body.data;
    segmentSchema.parse(segment);
    expect(decodeCharacters(segment.tokens)).toBe('<user>hi<assistant>hello<user>again<assistant>follow');
    const text = decodeCharacters(segment.tokens);
    const trainable = segment.tokens.filter(
      (_: number, index: number) => segment.full_loss_mask[index] === 1,
    );
    expect(decodeCharacters(trainable)).toBe('hellofollow');
    expect(text.indexOf('hello')).toBe(segment.full_loss_mask.indexOf(1));
    for (let index = 0; index < segment.tokens.length; index++) {
      expect(segment.full_logprobs[index]).toBe(segment.full_loss_mask[index] === 1 ? -0.1 : 0);
    }
    expect(segment.extra_info).toMatchObject({
      alignment_method: 'tito',
      segment_view: 'lineage',
      context_token_count: '<user>hi<assistant><user>again<assistant>'.length,
      output_token_count: 11,
      num_steps: 2,
      step_ids: ['step-000001', 'step-000002'],
      lineage_id: 'lineage-000001',
      segment_reason: 'initial',
      finalization_complete: true,
    });
    expect(segment.full_versions.filter((version: string) => version === 'v1')).toHaveLength(11);

    const timeline = await harness.call('POST', '/trajectory/read', {
      trajectory_id: 's1',
      segment_view: 'timeline',
    });
    expect(timeline.body.data).toHaveLength(2);
    const step2 = timeline.body.data[1];
    expect(decodeCharacters(step2.tokens)).toBe('<user>hi<assistant>hello<user>again<assistant>follow');
    expect(step2.aligned_response_length).toBe(6);
    expect(step2.extra_info).toMatchObject({
      alignment_method: 'snapshot_step',
      route_type: 'append',
      route_base_step_id: 'step-000001',
      num_turns: 1,
      turn_ids: [segment.turn_id],
      trajectory_num_segments: 2,
      history_rewritten: false,
    });
    expect(typeof step2.extra_info.timestamp).toBe('string');
    for (const record of timeline.body.data) segmentSchema.parse(record);
    expect(step2.full_versions.slice(0, 5)).toEqual(['-1', '-1', '-1', '-1', '-1']);
  });

  it('snapshot mode yields one timeline segment per step', async () => {
    harness = await startHarness({ config: { tokenBuildMode: 'snapshot' } });
    const replies = ['hello', 'follow'];
    harness.engine.script = (_request, index) => ({ text: replies[index] });
    await chat([user('hi')], { 'x-session-id': 's1' });
    await chat([user('hi'), assistant('hello'), user('again')], { 'x-session-id': 's1' });
    expect(harness.engine.requests[0]!.body.logprob_start_len).toBe(0);
    const finalized = await harness.call('POST', '/session/finalize', { session_id: 's1' });
    expect(finalized.body).toMatchObject({
      num_segments: 2,
      num_timeline_segments: 2,
      num_turns: 1,
      token_build_mode: 'snapshot',
    });
    const read = await harness.call('POST', '/trajectory/read', { session_id: 's1' });
    expect(
      read.body.data.map(
        (segment: { extra_info: { segment_view: string } }) => segment.extra_info.segment_view,
      ),
    ).toEqual(['timeline', 'timeline']);
    expect(read.body.data.map((segment: { finish_reason: string }) => segment.finish_reason)).toEqual([
      'segment_boundary',
      'stop',
    ]);
    expect(decodeCharacters(read.body.data[1].tokens)).toBe(
      '<user>hi<assistant>hello<user>again<assistant>follow',
    );
  });

  it('a history rewrite in the same turn starts a second segment (§1.8)', async () => {
    harness = await startHarness();
    harness.engine.script = () => ({ text: 'answer' });
    await chat([user('first')], { 'x-session-id': 's', 'x-turn-id': 't1' });
    await chat([user('different first')], { 'x-session-id': 's', 'x-turn-id': 't1' });
    const finalized = await harness.call('POST', '/session/finalize', { session_id: 's' });
    expect(finalized.body.history_rewritten).toBe(true);
    expect(finalized.body.num_segments).toBe(2);
    const timeline = await harness.call('POST', '/trajectory/read', {
      trajectory_id: 's',
      segment_view: 'timeline',
    });
    expect(timeline.body.data[1].extra_info.segment_reasons).toEqual(['history_rewrite']);
    expect(timeline.body.data[1].extra_info.route_type).toBe('create');
  });

  it('a rewrite with a tools change reports only history_rewrite in the timeline view', async () => {
    harness = await startHarness({ config: { tokenBuildMode: 'snapshot' } });
    harness.engine.script = () => ({ text: 'answer' });
    const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object' } } };
    await chat([user('first')], { 'x-session-id': 's', 'x-turn-id': 't1' });
    await chat([user('other')], { 'x-session-id': 's', 'x-turn-id': 't1' }, { tools: [tool] });
    const read = await harness.call('POST', '/trajectory/read', {
      trajectory_id: (await harness.call('POST', '/session/finalize', { session_id: 's' })).body
        .trajectory_id,
    });
    expect(read.body.data[1].extra_info.segment_reasons).toEqual(['history_rewrite']);
  });

  it('a TITO prefix mismatch with a new turn starts a new lineage with exactly its own tokens', async () => {
    harness = await startHarness();
    const replies = ['first', 'second'];
    harness.engine.script = (_request, index) => ({ text: replies[index] });
    await chat([user('hello')], { 'x-session-id': 's', 'x-turn-id': 't1' });
    await chat([user('fresh')], { 'x-session-id': 's', 'x-turn-id': 't2' });
    const finalized = await harness.call('POST', '/session/finalize', { session_id: 's' });
    expect(finalized.body.num_segments).toBe(2);
    expect(finalized.body.history_rewritten).toBe(false);
    const lineage = await harness.call('POST', '/trajectory/read', { trajectory_id: 's' });
    expect(lineage.body.data[1].extra_info.segment_reason).toBe('initial');
    expect(lineage.body.data[1].extra_info.lineage_id).toBe('lineage-000002');
    expect(decodeCharacters(lineage.body.data[1].tokens)).toBe('<user>fresh<assistant>second');
    const timeline = await harness.call('POST', '/trajectory/read', {
      trajectory_id: 's',
      segment_view: 'timeline',
    });
    expect(timeline.body.data[1].extra_info.segment_reasons).toEqual(['message_prefix_mismatch']);
  });

  it('a tools change splits the lineage into two lineage segments', async () => {
    harness = await startHarness();
    harness.engine.script = () => ({ text: 'ok' });
    const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object' } } };
    await chat([user('a')], { 'x-session-id': 's' });
    await chat([user('a'), assistant('ok'), user('b')], { 'x-session-id': 's' }, { tools: [tool] });
    const finalized = await harness.call('POST', '/session/finalize', { session_id: 's' });
    expect(finalized.body.num_segments).toBe(2);
    const lineage = await harness.call('POST', '/trajectory/read', { trajectory_id: 's' });
    expect(
      lineage.body.data.map(
        (segment: { extra_info: Record<string, unknown> }) => segment.extra_info.segment_reason,
      ),
    ).toEqual(['initial', 'tools_changed']);
    // Every segment but the last ends on the boundary; the last keeps the engine's reason.
    expect(lineage.body.data.map((segment: { finish_reason: string }) => segment.finish_reason)).toEqual([
      'segment_boundary',
      'stop',
    ]);
    expect(lineage.body.data[1].extra_info.lineage_id).toBe('lineage-000001');
    // The new segment is re-tokenized in full: it stands alone as a training sample.
    expect(decodeCharacters(lineage.body.data[1].tokens)).toBe('<user>a<assistant>ok<user>b<assistant>ok');
    expect(lineage.body.data[1].full_loss_mask.filter((value: number) => value === 1)).toHaveLength(2);
  });

  it('a branch from an earlier step starts a lineage that remembers its base', async () => {
    harness = await startHarness();
    const replies = ['one', 'two', 'three'];
    harness.engine.script = (_request, index) => ({ text: replies[index] });
    await chat([user('q')], { 'x-session-id': 's' });
    await chat([user('q'), assistant('one'), user('more')], { 'x-session-id': 's' });
    await chat([user('q'), assistant('one'), user('other')], { 'x-session-id': 's' });
    const finalized = await harness.call('POST', '/session/finalize', { session_id: 's' });
    expect(finalized.body.num_segments).toBe(2);
    const lineage = await harness.call('POST', '/trajectory/read', { trajectory_id: 's' });
    expect(lineage.body.data[1].extra_info.branch_from_step_id).toBe('step-000001');
    expect(decodeCharacters(lineage.body.data[1].tokens)).toBe(
      '<user>q<assistant>one<user>other<assistant>three',
    );
    const masked = lineage.body.data[1].tokens.filter(
      (_: number, index: number) => lineage.body.data[1].full_loss_mask[index] === 1,
    );
    expect(decodeCharacters(masked)).toBe('three');
  });
});

describe('turn rules (§1.2)', () => {
  it('implicit mode refuses a later explicit turn id', async () => {
    harness = await startHarness();
    expect((await chat([user('a')], { 'x-session-id': 's' })).status).toBe(200);
    const response = await chat([user('a')], { 'x-session-id': 's', 'x-turn-id': 't1' });
    expect(response.status).toBe(400);
    expect(response.body.detail).toMatch(/turn_id/);
  });

  it('explicit mode needs a turn id, accepts repeats and new ids, refuses returning to an old one', async () => {
    harness = await startHarness();
    const headers = (turn?: string) => ({ 'x-session-id': 's', ...(turn ? { 'x-turn-id': turn } : {}) });
    expect((await chat([user('a')], headers('t1'))).status).toBe(200);
    expect((await chat([user('a')], headers())).status).toBe(400);
    expect((await chat([user('a')], headers('t1'))).status).toBe(200);
    expect((await chat([user('a')], headers('t2'))).status).toBe(200);
    const back = await chat([user('a')], headers('t1'));
    expect(back.status).toBe(400);
    expect(back.body.detail).toMatch(/earlier turn/);
  });

  it('refuses the reserved implicit prefix and reads ids from the body as fallback', async () => {
    harness = await startHarness();
    const reserved = await chat([user('a')], { 'x-session-id': 's' }, { turn_id: '__implicit_turn__:abc' });
    expect(reserved.status).toBe(400);
    const ok = await chat(
      [user('a')],
      {},
      { session_id: 'body-session', instance_id: 'body-instance', turn_id: 'bt' },
    );
    expect(ok.status).toBe(200);
    const finalized = await harness.call('POST', '/session/finalize', { session_id: 'body-session' });
    expect(finalized.body.instance_id).toBe('body-instance');
    const routed = await chat([user('a')], { 'x-smg-routing-key': 'routed' });
    expect(routed.status).toBe(200);
    expect((await harness.call('POST', '/session/finalize', { session_id: 'routed' })).status).toBe(200);
  });
});

describe('a session base URL (/s/{session}/v1)', () => {
  // The headers opencode 1.18.33 sets on every model request (its own session id), over any
  // header configured for its provider.
  const opencodeHeaders = {
    'x-session-affinity': 'ses_0f3c9a1e2ffeAbCdEf012345',
    'X-Session-Id': 'ses_0f3c9a1e2ffeAbCdEf012345',
    'User-Agent': 'opencode/1.18.33',
    'x-instance-id': 'group-1',
  };

  it("records under the URL's session, not the agent's own X-Session-Id, and finalize finds it", async () => {
    harness = await startHarness();
    harness.engine.script = (_request, index) => ({ text: ['first', 'second'][index] });
    const base = new ProxyClient({ baseUrl: harness.url })
      .sessionBaseUrl('rollout:7')
      .slice(harness.url.length);
    expect(base).toBe('/s/rollout%3A7/v1');
    const first = await harness.call(
      'POST',
      `${base}/chat/completions`,
      { model: 'm', messages: [user('hi')] },
      opencodeHeaders,
    );
    expect(first.status).toBe(200);
    const second = await harness.call(
      'POST',
      `${base}/chat/completions`,
      { model: 'm', messages: [user('hi'), assistant('first'), user('more')] },
      opencodeHeaders,
    );
    expect(second.status).toBe(200);
    expect(harness.engine.requests.map((request) => request.headers['x-smg-routing-key'])).toEqual([
      'rollout:7',
      'rollout:7',
    ]);
    expect((await harness.call('GET', `${base}/models`)).status).toBe(200);
    // Nothing was recorded under the agent's id.
    const agentOwn = await harness.call('POST', '/session/finalize', {
      session_id: opencodeHeaders['X-Session-Id'],
    });
    expect(agentOwn.status).toBe(404);
    const finalized = await harness.call('POST', '/session/finalize', { session_id: 'rollout:7' });
    expect(finalized.body).toMatchObject({
      success: true,
      instance_id: 'group-1',
      num_steps: 2,
      num_segments: 1,
    });
  });

  it('refuses a bad session segment with a 400 and serves only the agent routes under it', async () => {
    harness = await startHarness();
    const control = await harness.call('POST', '/s/%01/v1/chat/completions', {
      model: 'm',
      messages: [user('hi')],
    });
    expect(control.status).toBe(400);
    expect(control.body.detail).toMatch(/path session .*control character/);
    const malformed = await harness.call('POST', '/s/%E0%A4%A/v1/chat/completions', {
      model: 'm',
      messages: [user('hi')],
    });
    expect(malformed.status).toBe(400);
    expect(malformed.body.detail).toMatch(/percent-encoding/);
    expect((await harness.call('POST', '/s/x/session/finalize', { session_id: 'x' })).status).toBe(404);
    expect(harness.engine.requests).toHaveLength(0);
    expect((await chat([user('hi')], { 'x-session-id': 'after' })).status).toBe(200);
  });
});
