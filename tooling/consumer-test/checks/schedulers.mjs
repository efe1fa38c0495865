// @dressage/schedulers from its tarball: a JSONL prompt file, a sync scheduler and a generate
// function; one rollout yields complete groups in index order.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SampleStatus } from '@dressage/protocol';
import { createRolloutScheduler, PromptDataSource } from '@dressage/schedulers';
import { seededPermutation } from '@dressage/schedulers/internal';

const directory = mkdtempSync(join(tmpdir(), 'dressage-schedulers-'));
const file = join(directory, 'prompts.jsonl');
writeFileSync(
  file,
  ['What is 1 + 1?', 'What is 2 + 3?', 'What is 4 + 4?']
    .map((prompt, index) =>
      JSON.stringify({ prompt, label: String([2, 5, 8][index]), metadata: { instance_id: `p${index}` } }),
    )
    .join('\n'),
);
const dataSource = await PromptDataSource.fromJsonl(file, { nSamplesPerPrompt: 2, seed: 1 });
const scheduler = createRolloutScheduler(
  'sync',
  {
    dataSource,
    generate: async (sample) => ({
      ...sample,
      tokens: [1, 2, 3],
      response: sample.label,
      response_length: 1,
      loss_mask: [1],
      status: SampleStatus.COMPLETED,
      reward: 1,
    }),
  },
  { rolloutBatchSize: 2, nSamplesPerPrompt: 2, numRollout: 1 },
);
const { samples } = await scheduler.generateRollout(0);
await scheduler.shutdown();
assert.equal(samples.length, 2);
assert.ok(samples.every((group) => group.length === 2 && group[0].group_index === group[1].group_index));
// The building blocks are a subpath of their own.
assert.deepEqual(Array.from(seededPermutation(5, 7)).sort(), [0, 1, 2, 3, 4]);
console.log(`one sync rollout: ${samples.length} groups of ${samples[0].length} samples from a JSONL file`);
