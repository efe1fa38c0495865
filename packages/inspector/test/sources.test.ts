import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { segmentToJson, trajectoryReadToJson } from '@dressage/protocol';
import { TrajectoryStore } from '@dressage/proxy/internal';
import { describe, expect, it } from 'vitest';
import { TokenDecoder, tokenPage } from '../src/session-detail.js';
import { loadRunDirectory } from '../src/sources/run-directory.js';
import { loadSegmentFiles } from '../src/sources/segment-file.js';
import { loadStoreDirectory, storeLogName } from '../src/sources/store-directory.js';
import { agentSession, qwenTokenizer, writeFixtureStore } from './fixtures.js';

describe('store directory', () => {
  it('replays puts and tombstones read-only and matches what /trajectory/read returns', async () => {
    const { directory, segments } = await writeFixtureStore();
    const source = loadStoreDirectory(directory);
    expect(source.summaries.map((summary) => summary.id)).toEqual(['session-a', 'session-b']);
    expect(source.details).toMatchObject({ tombstones: 1 });
    const [a, b] = source.summaries;
    expect(a).toMatchObject({ reward: 1, segmentCount: 2, versions: ['3', '4'], multiVersion: true });
    expect(a!.reasons).toEqual(['initial', 'history_rewrite', 'message_prefix_mismatch']);
    expect(b).toMatchObject({ reward: 0, truncated: true, status: 'truncated', multiVersion: false });

    const session = source.load('session-a')!;
    // What the proxy itself answers for the same data (opening it compacts the log, so last).
    const proxy = await TrajectoryStore.open({ directory });
    const fromProxy = (await proxy.read('session-a', {})).data;
    await proxy.close();
    for (const [index, segment] of session.segments.entries()) {
      expect(segment.tokens).toEqual(segments[index]!.ids);
      expect(segment.lossMask).toEqual(Array.from(fromProxy[index]!.full_loss_mask));
      expect(segment.logprobs).toEqual(Array.from(fromProxy[index]!.full_logprobs));
      expect(segment.versions).toEqual(fromProxy[index]!.full_versions);
      expect(segment.reason).toBe(segments[index]!.reason);
    }
  });

  it('never writes to the store it reads', async () => {
    const { directory } = await writeFixtureStore();
    const log = join(directory, storeLogName);
    const before = readFileSync(log);
    const source = loadStoreDirectory(directory);
    source.load('session-a');
    expect(readFileSync(log).equals(before)).toBe(true);
  });
});

describe('segment files', () => {
  it('reads /trajectory/read answers as JSON and JSONL and groups segments by trajectory', async () => {
    const { directory } = await writeFixtureStore();
    const copy = await TrajectoryStore.open({ directory });
    const a = await copy.read('session-a', {});
    const b = await copy.read('session-b', {});
    await copy.close();
    const folder = mkdtempSync(join(tmpdir(), 'inspector-files-'));
    const json = join(folder, 'read.json');
    const jsonl = join(folder, 'segments.jsonl');
    writeFileSync(
      json,
      trajectoryReadToJson({ ...a, success: true, mode: 'trajectory', meta_info: copy.stats() }),
    );
    writeFileSync(jsonl, `${b.data.map(segmentToJson).join('\n')}\n`);
    const source = loadSegmentFiles([json, jsonl]);
    expect(source.summaries.map((summary) => [summary.id, summary.segmentCount, summary.status])).toEqual([
      ['session-a', 2, 'completed'],
      ['session-b', 1, 'truncated'],
    ]);
    const decoder = new TokenDecoder(await qwenTokenizer());
    const page = tokenPage(source.load('session-a')!, 'lineage', 0, decoder, 0, 5)!;
    expect(page.tokens.map((token) => token.text)).toEqual(['<|im_start|>', 'system', '\n', 'You', ' are']);
    expect(page.total).toBe(a.data[0]!.tokens.length);
  });
});

describe('run directory', () => {
  it('reads exported samples, re-aligning the response-tail mask and logprobs over every token', async () => {
    const [segment] = await agentSession();
    const directory = mkdtempSync(join(tmpdir(), 'inspector-run-'));
    mkdirSync(join(directory, 'samples'));
    const promptLength = segment!.mask.indexOf(1);
    const sample = {
      step: 3,
      session_id: 'run-session',
      instance_id: 'instance-9',
      trajectory_id: 'run-session',
      segment_index: 0,
      rollout_id: 3,
      group_index: 0,
      index: 0,
      status: 'aborted',
      reward: 0.5,
      remove_sample: false,
      tokens: segment!.ids,
      prompt_length: promptLength,
      loss_mask: segment!.mask.slice(promptLength),
      rollout_log_probs: segment!.logprobs.slice(promptLength),
      full_versions: segment!.versions,
      messages: segment!.messages,
      segment_reason: 'initial',
      metadata: { finish_reason: 'abort' },
    };
    writeFileSync(join(directory, 'samples', 'step-000003.jsonl'), `${JSON.stringify(sample)}\n`);
    writeFileSync(join(directory, 'metrics.jsonl'), '{"step":3,"reward":0.5}\n');
    writeFileSync(join(directory, 'run-state.json'), '{"step":3}');
    // Two failed attempts, the second line torn (a run killed mid-write).
    writeFileSync(
      join(directory, 'errors.jsonl'),
      '{"step":3,"stage":"generate","session_id":"run-session","code":"unavailable","message":"down"}\n{"step":3,"sta',
    );
    const source = loadRunDirectory(directory);
    expect(source.errors).toEqual([
      { step: 3, stage: 'generate', session_id: 'run-session', code: 'unavailable', message: 'down' },
    ]);
    expect(source.details.errors).toBe(1);
    expect(source.summaries).toHaveLength(1);
    expect(source.summaries[0]).toMatchObject({ id: 'run-session', reward: 0.5, aborted: true, step: 3 });
    expect(source.details).toMatchObject({ lastMetrics: { step: 3, reward: 0.5 }, runState: { step: 3 } });
    const loaded = source.load('run-session')!.segments[0]!;
    expect(loaded.lossMask).toEqual(segment!.mask);
    expect(loaded.logprobs).toEqual(segment!.logprobs);
    expect(loaded.versions).toEqual(segment!.versions);
    expect(() => loadRunDirectory(join(directory, 'samples'))).toThrow(/no samples\/ folder/);
  });
});
