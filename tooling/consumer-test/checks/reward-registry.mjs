// @dressage/reward-registry from its tarball: register a reward, load a reward module from a file,
// and score samples through the dispatcher.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSample } from '@dressage/protocol';
import { computeRewards, loadRewardModules, registerReward } from '@dressage/reward-registry';

registerReward('short_answer', (sample) => (sample.response.length <= 20 ? 1 : 0));
const directory = mkdtempSync(join(tmpdir(), 'dressage-reward-module-'));
const modulePath = join(directory, 'rewards.mjs');
writeFileSync(modulePath, 'export const rewards = { always_half: () => 0.5 };\n');
await loadRewardModules([modulePath]);

const rewards = await computeRewards(
  [
    createSample({ index: 0, response: 'The answer is 42', label: '42' }),
    createSample({
      index: 1,
      response: 'a long answer that is not short at all',
      metadata: { reward_fn: 'short_answer' },
    }),
    createSample({ index: 2, response: 'x', metadata: { reward_fn: 'always_half' } }),
  ],
  { timeoutMs: 5_000 },
);
assert.deepEqual(rewards, [1, 0, 0.5]);
console.log(
  `scored 3 samples with contains_label, a registered reward and a module reward: ${rewards.join(', ')}`,
);
