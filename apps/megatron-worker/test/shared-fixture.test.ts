import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSample, type SampleInput } from '@dressage/protocol';
import { convertSamplesToTrainData, type TrainingOptions } from '@dressage/trainer-bridge';
import { describe, expect, it } from 'vitest';
import { appRoot } from './worker-process.js';

interface Fixture {
  samples: (SampleInput & { response_length: number; loss_mask: (0 | 1)[] | null })[];
  cases: { options: TrainingOptions; expected: Record<string, number[]> }[];
}

const fixture = JSON.parse(
  readFileSync(join(appRoot, 'tests/fixtures/shared-batch.json'), 'utf8'),
) as Fixture;

describe('the shared fixture (the Python worker checks the same expected values)', () => {
  it.each(fixture.cases.map((entry) => [JSON.stringify(entry.options), entry] as const))(
    'TypeScript reproduces %s',
    (_name, entry) => {
      const samples = fixture.samples.map((sample, index) =>
        createSample({
          ...sample,
          tokens: [100 + index, ...new Array(sample.response_length).fill(7)],
        }),
      );
      const data = convertSamplesToTrainData(samples, entry.options);
      expect(data.raw_reward).toEqual(entry.expected.raw_reward);
      expect(data.rewards).toEqual(entry.expected.rewards);
      expect(data.rollout_ids).toEqual(entry.expected.rollout_ids);
      expect(data.rollout_mask_sums).toEqual(entry.expected.rollout_mask_sums);
    },
  );

  it('covers denominators below 1 and several estimators', () => {
    const sums = fixture.cases.flatMap((entry) => entry.expected.rollout_mask_sums as number[]);
    expect(sums.some((value) => value > 0 && value < 1)).toBe(true);
    expect(
      new Set(fixture.cases.map((entry) => entry.options.advantageEstimator)).size,
    ).toBeGreaterThanOrEqual(4);
  });
});
