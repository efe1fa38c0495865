// Resident and heap bytes per stored token with 10M tokens held in a TrajectoryStore, as finalize
// stores them: 20-turn TITO lineages (one block) with 20 timeline records each. Run with --expose-gc;
// prints one JSON line. The proxy benchmark runs it in a fresh process.
import { type StoredTrajectory, TrajectoryStore } from '../src/trajectory-store.js';

const turns = 20;

function collectGarbage(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with --expose-gc');
  gc();
}

async function bytesPerStoredToken(): Promise<{ rssBytesPerToken: number; heapBytesPerToken: number }> {
  const totalTokens = 10_000_000;
  const tokensPerTrajectory = 20_000;
  const store = await TrajectoryStore.open({ directory: null });
  collectGarbage();
  const before = process.memoryUsage();
  for (let index = 0; index < totalTokens / tokensPerTrajectory; index++) {
    const ids = new Int32Array(tokensPerTrajectory);
    const logprobs = new Float32Array(tokensPerTrajectory);
    const ranges: number[] = [];
    const step = tokensPerTrajectory / turns;
    for (let turn = 0; turn < turns; turn++) ranges.push(turn * step + step / 2, (turn + 1) * step);
    for (let token = 0; token < tokensPerTrajectory; token++) {
      ids[token] = (token * 7919) % 151_000;
      logprobs[token] = -0.01 * (token % 100);
    }
    const records: StoredTrajectory['records'] = [
      {
        view: 'lineage',
        segmentIndex: 0,
        meta: { uid: `t${index}:lineage:0` },
        block: 0,
        end: tokensPerTrajectory,
        responseStart: null,
      },
    ];
    for (let turn = 0; turn < turns; turn++) {
      records.push({
        view: 'timeline',
        segmentIndex: turn,
        meta: { uid: `t${index}:timeline:${turn}` },
        block: 0,
        end: (turn + 1) * step,
        responseStart: turn * step + step / 2,
      });
    }
    await store.put({
      trajectoryId: `t${index}`,
      sessionId: `t${index}`,
      instanceId: `g${index % 64}`,
      finalizedAt: Date.now(),
      recordVersions: true,
      records,
      blocks: [
        {
          ids,
          logprobs,
          maskRanges: Uint32Array.from(ranges),
          versionRuns: [{ end: tokensPerTrajectory, version: 'v1' }],
        },
      ],
    });
  }
  collectGarbage();
  const after = process.memoryUsage();
  const heap = after.heapUsed + after.arrayBuffers - (before.heapUsed + before.arrayBuffers);
  const result = {
    rssBytesPerToken: (after.rss - before.rss) / totalTokens,
    heapBytesPerToken: heap / totalTokens,
  };
  if (store.size !== totalTokens / tokensPerTrajectory) throw new Error('store lost trajectories');
  return result;
}

console.log(JSON.stringify(await bytesPerStoredToken()));
