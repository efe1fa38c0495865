// A finalized trajectory as the proxy stores it: a TITO lineage of `tokens` tokens over `turns` turns
// (one block, loss mask on the second half of each turn) with one timeline record per turn.

import { segmentMeta } from '../src/__fixtures__/segment-meta.js';
import type { StoredTrajectory } from '../src/store-records.js';

/** Trajectory `t<index>` of instance group `g<index % 64>`. */
export function syntheticTrajectory(index: number, tokens: number, turns = 20): StoredTrajectory {
  const ids = new Int32Array(tokens);
  const logprobs = new Float32Array(tokens);
  const ranges: number[] = [];
  const step = tokens / turns;
  for (let turn = 0; turn < turns; turn++) ranges.push(turn * step + step / 2, (turn + 1) * step);
  for (let token = 0; token < tokens; token++) {
    ids[token] = (token * 7919) % 151_000;
    logprobs[token] = -0.01 * (token % 100);
  }
  const records: StoredTrajectory['records'] = [
    {
      view: 'lineage',
      segmentIndex: 0,
      meta: segmentMeta(`t${index}:lineage:0`),
      block: 0,
      end: tokens,
      responseStart: null,
    },
  ];
  for (let turn = 0; turn < turns; turn++) {
    records.push({
      view: 'timeline',
      segmentIndex: turn,
      meta: segmentMeta(`t${index}:timeline:${turn}`, { segment_index: turn }),
      block: 0,
      end: (turn + 1) * step,
      responseStart: turn * step + step / 2,
    });
  }
  return {
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
        versionRuns: [{ end: tokens, version: 'v1' }],
      },
    ],
  };
}
