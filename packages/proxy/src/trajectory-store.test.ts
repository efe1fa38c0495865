import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { temporaryDirectory } from './__fixtures__/harness.js';
import { type StoredTrajectory, TrajectoryStore } from './trajectory-store.js';

const directories: Array<{ remove: () => void }> = [];
afterEach(() => {
  for (const directory of directories.splice(0)) directory.remove();
});

function trajectory(id: string, tokens: number, instanceId = 'g'): StoredTrajectory {
  const ids = Int32Array.from({ length: tokens }, (_, index) => index + 1);
  const logprobs = Float32Array.from({ length: tokens }, (_, index) => (index >= tokens / 2 ? -0.25 : 0));
  return {
    trajectoryId: id,
    sessionId: id,
    instanceId,
    finalizedAt: Date.now(),
    recordVersions: true,
    records: [
      {
        view: 'lineage',
        segmentIndex: 0,
        meta: { uid: `${id}:0`, segment_index: 0 },
        block: 0,
        end: tokens,
        responseStart: null,
      },
    ],
    blocks: [
      {
        ids,
        logprobs,
        maskRanges: Uint32Array.of(tokens / 2, tokens),
        versionRuns: [
          { end: tokens / 2, version: '-1' },
          { end: tokens, version: 'v3' },
        ],
      },
    ],
  };
}

describe('TrajectoryStore', () => {
  it('replays puts, skips drops and a torn last line, and compacts the log', async () => {
    const directory = temporaryDirectory();
    directories.push(directory);
    const first = await TrajectoryStore.open({ directory: directory.path });
    await first.put(trajectory('a', 8));
    await first.put(trajectory('b', 8));
    await first.put(trajectory('c', 8));
    await first.discard('b');
    const before = await first.read('a', {});
    await first.close();
    appendFileSync(join(directory.path, 'trajectories.jsonl'), '{"op":"put","trajectory":{"trunc');

    const second = await TrajectoryStore.open({ directory: directory.path });
    expect(second.size).toBe(2);
    expect(second.has('b')).toBe(false);
    const after = await second.read('a', {});
    expect(after).toEqual(before);
    expect(after.data[0]).toMatchObject({
      tokens: [1, 2, 3, 4, 5, 6, 7, 8],
      full_loss_mask: [0, 0, 0, 0, 1, 1, 1, 1],
      full_logprobs: [0, 0, 0, 0, -0.25, -0.25, -0.25, -0.25],
      full_versions: ['-1', '-1', '-1', '-1', 'v3', 'v3', 'v3', 'v3'],
      aligned_response_length: 4,
    });
    const lines = readFileSync(join(directory.path, 'trajectories.jsonl'), 'utf8').trim().split('\n');
    expect(lines).toHaveLength(2);
    await second.close();
  });

  it('evicts persisted token data over the memory limit and reads it back from the log', async () => {
    const directory = temporaryDirectory();
    directories.push(directory);
    const store = await TrajectoryStore.open({ directory: directory.path, memoryLimitBytes: 1000 });
    await store.put(trajectory('old', 64));
    await store.put(trajectory('new', 64));
    // 64 tokens x (4 + 4) bytes + ranges: only one trajectory fits in 1000 bytes.
    expect(store.residentBytes).toBeLessThanOrEqual(1000);
    const read = await store.read('old', { drain: true });
    expect(read.data[0]?.tokens).toHaveLength(64);
    expect(read.drained).toBe(true);
    expect(store.has('old')).toBe(false);
    await store.close();
  });

  it('batch mode pops groups that reached the minimum size or timed out', async () => {
    const store = await TrajectoryStore.open({ directory: null });
    await store.put(trajectory('a1', 4, 'A'));
    await store.put(trajectory('a2', 4, 'A'));
    await store.put(trajectory('b1', 4, 'B'));
    expect(store.stats(2, 60_000)).toEqual({ total_items: 3, total_instances: 2, ready_instances: 1 });
    const groups = await store.readBatch({ minGroupSize: 2, groupTimeoutMs: 60_000 });
    expect(groups.map((group) => group.length)).toEqual([2]);
    expect(await store.readBatch({ minGroupSize: 2, groupTimeoutMs: 60_000 })).toEqual([]);
    expect(
      (await store.readBatch({ minGroupSize: 2, groupTimeoutMs: 0 })).map((group) => group.length),
    ).toEqual([1]);
  });
});
