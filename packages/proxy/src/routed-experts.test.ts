import { expandSegmentsToSamples, markAbortedNoGrad, type RoutedExperts } from '@dressage/multi-segment';
import {
  createSample,
  DressageError,
  type Segment,
  segmentSchema,
  trajectoryReadShapeSchema,
} from '@dressage/protocol';
import { convertSamplesToTrainData } from '@dressage/trainer-bridge';
import { afterEach, describe, expect, it } from 'vitest';
import { type Harness, startHarness, temporaryDirectory } from './__fixtures__/harness.js';
import { scriptedExpert } from './__fixtures__/scripted-engine.js';
import { segmentMeta } from './__fixtures__/segment-meta.js';
import { TrajectoryStore } from './trajectory-store.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const user = (content: string) => ({ role: 'user', content });
const assistant = (content: string) => ({ role: 'assistant', content });

// The segments of a `/trajectory/read` answer by id, as ProxyClient.readTrajectory reads them.
function segmentsOf(body: unknown): Segment[] {
  const read = trajectoryReadShapeSchema.parse(body);
  if (read.mode !== 'trajectory') throw new Error(`expected mode trajectory, got ${read.mode}`);
  return read.data;
}

function decodeChunk(chunk: { data: string; dtype: string }): number[] {
  const bytes = Buffer.from(chunk.data, 'base64');
  const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
  if (chunk.dtype === 'uint8') return Array.from(new Uint8Array(copy));
  if (chunk.dtype === 'uint16') return Array.from(new Uint16Array(copy));
  return Array.from(new Int32Array(copy));
}

// The rows a record must carry: one per token but the last, from that token's id.
function expectedRows(tokens: number[], width: number): number[] {
  const out: number[] = [];
  for (let row = 0; row < tokens.length - 1; row++)
    for (let slot = 0; slot < width; slot++) out.push(scriptedExpert(tokens[row]!, slot));
  return out;
}

async function twoTurns(replies: Array<Record<string, unknown>>): Promise<void> {
  harness!.engine.script = (_request, index) => replies[index] ?? { text: 'done' };
  const headers = { 'x-session-id': 's' };
  const body = (messages: unknown[]) => ({ model: 'm', messages });
  expect((await harness!.call('POST', '/v1/chat/completions', body([user('hi')]), headers)).status).toBe(200);
  const second = await harness!.call(
    'POST',
    '/v1/chat/completions',
    body([user('hi'), assistant('hello'), user('again')]),
    headers,
  );
  expect(second.status).toBe(200);
  expect((await harness!.call('POST', '/session/finalize', { session_id: 's' })).status).toBe(200);
}

describe('R3 routed experts', () => {
  it('writes len(tokens) - 1 rows per record in the configured dtype, lineage and timeline', async () => {
    harness = await startHarness({
      config: { useRolloutRoutingReplay: true, routedExpertsDtype: 'uint8' },
    });
    await twoTurns([{ text: 'hello' }, { text: 'follow' }]);
    expect(harness!.engine.requests.every((request) => request.body.return_routed_experts === true)).toBe(
      true,
    );
    for (const view of ['lineage', 'timeline']) {
      const read = await harness!.call('POST', '/trajectory/read', {
        trajectory_id: 's',
        segment_view: view,
      });
      expect(read.body.data.length).toBe(view === 'lineage' ? 1 : 2);
      for (const segment of read.body.data) {
        segmentSchema.parse(segment);
        expect(segment.routed_experts_chunks).toHaveLength(1);
        const [chunk] = segment.routed_experts_chunks;
        expect(chunk.row_count).toBe(segment.tokens.length - 1);
        expect(chunk.dtype).toBe('uint8');
        expect(decodeChunk(chunk)).toEqual(expectedRows(segment.tokens, 4));
      }
    }
  });

  it('snapshot mode: every timeline record carries the rows of its own prompt and output', async () => {
    harness = await startHarness({ config: { useRolloutRoutingReplay: true, tokenBuildMode: 'snapshot' } });
    await twoTurns([{ text: 'hello' }, { text: 'follow' }]);
    const read = await harness!.call('POST', '/trajectory/read', { trajectory_id: 's' });
    expect(read.body.data).toHaveLength(2);
    for (const segment of read.body.data) {
      expect(segment.routed_experts_chunks[0].row_count).toBe(segment.tokens.length - 1);
      expect(decodeChunk(segment.routed_experts_chunks[0])).toEqual(expectedRows(segment.tokens, 4));
    }
  });

  it('a call preempted and continued keeps the rows of both chunks', async () => {
    harness = await startHarness({ config: { useRolloutRoutingReplay: true, partialRollout: true } });
    harness!.engine.script = (_request, index) =>
      index === 0 ? { text: 'abcdefghijklmnopqrstuvwxyz', tokenDelayMs: 10 } : { text: 'XYZ' };
    const call = harness!.call(
      'POST',
      '/v1/chat/completions',
      { messages: [user('hi')] },
      { 'x-session-id': 's' },
    );
    await harness!.engine.waitForTokens(2);
    await harness!.call('POST', '/v1/rollout/pause', { timeout_seconds: 10 });
    await harness!.call('POST', '/v1/rollout/resume', {});
    expect((await call).status).toBe(200);
    expect(harness!.engine.requests).toHaveLength(2);
    await harness!.call('POST', '/session/finalize', { session_id: 's' });
    const read = await harness!.call('POST', '/trajectory/read', { trajectory_id: 's' });
    const [segment] = read.body.data;
    expect(segment.routed_experts_chunks[0].row_count).toBe(segment.tokens.length - 1);
    expect(decodeChunk(segment.routed_experts_chunks[0])).toEqual(expectedRows(segment.tokens, 4));
  });

  it('fills the rows an engine left out (routed_experts_start_len) from earlier calls', async () => {
    harness = await startHarness({ config: { useRolloutRoutingReplay: true, routedExpertsDtype: 'int32' } });
    // The second call only reports rows from the end of the first step's sequence on.
    const firstSequence = '<user>hi<assistant>hello'.length;
    await twoTurns([{ text: 'hello' }, { text: 'follow', routedExpertsStart: firstSequence - 1 }]);
    const read = await harness!.call('POST', '/trajectory/read', { trajectory_id: 's' });
    const [segment] = read.body.data;
    expect(segment.routed_experts_chunks[0].row_count).toBe(segment.tokens.length - 1);
    expect(decodeChunk(segment.routed_experts_chunks[0])).toEqual(expectedRows(segment.tokens, 4));
  });

  it('leaves chunks out when rows are missing, and without R3', async () => {
    harness = await startHarness({ config: { useRolloutRoutingReplay: true } });
    // A gap: the second call starts past every row known so far.
    await twoTurns([{ text: 'hello' }, { text: 'follow', routedExpertsStart: 30 }]);
    const read = await harness!.call('POST', '/trajectory/read', {
      trajectory_id: 's',
      segment_view: 'timeline',
    });
    expect(read.body.data[0].routed_experts_chunks).toHaveLength(1);
    expect(read.body.data[1].routed_experts_chunks).toBeUndefined();
    await harness!.close();

    harness = await startHarness();
    await twoTurns([{ text: 'hello' }, { text: 'follow' }]);
    expect(harness!.engine.requests.some((request) => 'return_routed_experts' in request.body)).toBe(false);
    const plain = await harness!.call('POST', '/trajectory/read', { trajectory_id: 's' });
    expect(plain.body.data[0].routed_experts_chunks).toBeUndefined();
  });

  it('survives the store log: rows read back after a reopen', async () => {
    const directory = temporaryDirectory();
    try {
      const store = await TrajectoryStore.open({ directory: directory.path });
      const ids = Int32Array.of(5, 6, 7, 8);
      await store.put({
        trajectoryId: 't',
        sessionId: 't',
        instanceId: 'g',
        finalizedAt: Date.now(),
        recordVersions: false,
        records: [
          {
            view: 'lineage',
            segmentIndex: 0,
            meta: segmentMeta('t:lineage:0'),
            block: 0,
            end: 4,
            responseStart: null,
          },
        ],
        blocks: [
          {
            ids,
            logprobs: new Float32Array(4),
            maskRanges: Uint32Array.of(2, 4),
            versionRuns: [{ end: 4, version: 'v1' }],
            routing: { dtype: 'uint16', width: 2, rows: 3, data: Uint16Array.of(1, 2, 3, 4, 500, 600) },
          },
        ],
      });
      await store.close();
      const reopened = await TrajectoryStore.open({ directory: directory.path });
      const { data } = await reopened.read('t', { instanceId: null, view: null, drain: false });
      expect(data[0]!.routed_experts_chunks).toEqual([
        {
          data: Buffer.from(Uint16Array.of(1, 2, 3, 4, 500, 600).buffer).toString('base64'),
          row_count: 3,
          dtype: 'uint16',
        },
      ]);
      await reopened.close();
    } finally {
      directory.remove();
    }
  });

  it('end to end: engine routing → proxy records → decoded samples → train batch', async () => {
    // 4 ids per row = 2 layers × top-2, stored as uint16 by the proxy.
    const shape = { numLayers: 2, moeRouterTopk: 2 };
    harness = await startHarness({
      config: { useRolloutRoutingReplay: true, routedExpertsDtype: 'uint16' },
    });
    await twoTurns([{ text: 'hello' }, { text: 'follow' }]);
    const read = await harness!.call('POST', '/trajectory/read', { trajectory_id: 's' });
    const segments = segmentsOf(read.body);
    const template = createSample({ index: 0, group_index: 0, session_id: 's' });
    const replay = { useRolloutRoutingReplay: true, ...shape, instanceId: 'p' };
    const [sample] = expandSegmentsToSamples(template, segments, replay);
    const routed = sample!.rollout_routed_experts as RoutedExperts;
    expect(routed.rows).toBe(sample!.tokens.length - 1);
    expect(Array.from(routed.ids)).toEqual(expectedRows(sample!.tokens, 4));

    // The token cap cuts the rows with the tokens.
    const cap = sample!.tokens.length - 3;
    const [capped] = expandSegmentsToSamples(template, segments, { ...replay, maxTokensPerGpu: cap });
    expect(capped!.tokens).toHaveLength(cap);
    expect(Array.from((capped!.rollout_routed_experts as RoutedExperts).ids)).toEqual(
      expectedRows(capped!.tokens, 4),
    );

    // A failed rollout trains on zero rows beside it.
    const dead = markAbortedNoGrad(
      createSample({ index: 1, group_index: 0, tokens: [1, 2, 3], response_length: 1, loss_mask: [1] }),
      { sessionId: 'dead', instanceId: 'p' },
    );
    const batch = convertSamplesToTrainData([sample!, dead], { globalBatchSize: 2, ...replay });
    const [live, zero] = batch.rollout_routed_experts as RoutedExperts[];
    expect(live).toBe(routed);
    expect(zero).toEqual({ rows: 2, numLayers: 2, topk: 2, ids: new Int32Array(8) });
    await harness!.close();

    // A proxy started without R3 gives records that expansion with replay on refuses, by name.
    harness = await startHarness();
    await twoTurns([{ text: 'hello' }, { text: 'follow' }]);
    const plain = await harness!.call('POST', '/trajectory/read', { trajectory_id: 's' });
    try {
      expandSegmentsToSamples(template, segmentsOf(plain.body), replay);
      expect.unreachable();
    } catch (error) {
      expect(DressageError.isInstance(error)).toBe(true);
      expect((error as DressageError).message).toContain('--use-rollout-routing-replay');
    }
  });
});
