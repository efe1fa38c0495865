// Resident and heap bytes per stored token with 10M tokens held in a TrajectoryStore, as finalize
// stores them: 20-turn TITO lineages (one block) with 20 timeline records each. Run with --expose-gc;
// prints one JSON line. The proxy benchmark runs it in a fresh process.
import { TrajectoryStore } from '../src/trajectory-store.js';
import { syntheticTrajectory } from './synthetic-trajectory.js';

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
    await store.put(syntheticTrajectory(index, tokensPerTrajectory, turns));
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
