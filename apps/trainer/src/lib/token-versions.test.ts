import { createSample, type PackedTrainBatch, packTrainBatch, type Sample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { tokenVersionStatistics, VersionHistory } from './token-versions.js';

// Two prompt tokens, then the response; `versions` cover every token, as the proxy records them.
function sample(versions: string[], mask: (0 | 1)[], rollout: number[]): Sample {
  return createSample({
    tokens: versions.map((_, index) => 100 + index),
    response_length: mask.length,
    loss_mask: mask,
    rollout_log_probs: rollout,
    metadata: { full_versions: versions },
  });
}

function packed(samples: readonly Sample[]): PackedTrainBatch {
  return packTrainBatch({
    tokens: samples.map((item) => item.tokens),
    response_lengths: samples.map((item) => item.response_length),
    loss_masks: samples.map((item) => item.loss_mask as (0 | 1)[]),
    rollout_log_probs: samples.map((item) => item.rollout_log_probs as number[]),
    rewards: samples.map(() => 0),
    raw_reward: samples.map(() => 0),
    truncated: samples.map(() => 0),
    sample_indices: samples.map((_, index) => index),
    rollout_ids: samples.map((_, index) => index),
    rollout_mask_sums: samples.map(() => 1),
  });
}

describe('tokenVersionStatistics', () => {
  const history = new VersionHistory('0');
  history.publish('1');
  history.publish('2');
  // A partial rollout: two tokens of version 1, then (after a weight update) one of version 2;
  // a tool-output token (mask 0) between them is not trained and not counted.
  const samples = [
    sample(['-1', '-1', '1', '1', '-1', '2'], [1, 1, 0, 1], [-1.1, -2, -9, -0.5]),
    sample(['-1', '-1', '2', '2'], [1, 1], [-0.3, -0.7]),
  ];
  const batch = packed(samples);

  it('measures each trained token against the weights the trainer holds, parity on version-equal tokens only', () => {
    const trainLogProbs = Float32Array.from([-1, -2.05, Number.NaN, -0.5, -0.3, -0.7]);
    const { metrics, parityMax, gapMean } = tokenVersionStatistics({
      samples,
      batch,
      history,
      trainerVersion: '2',
      trainLogProbs,
    });
    expect(gapMean).toBeCloseTo(2 / 5);
    expect(metrics['version_gap/max']).toBe(1);
    expect(metrics['version_gap/tokens_0']).toBeCloseTo(3 / 5);
    expect(metrics['version_gap/tokens_1']).toBeCloseTo(2 / 5);
    expect(metrics['version_gap/tokens_3_plus']).toBe(0);
    expect(metrics['parity/tokens']).toBe(3);
    expect(parityMax).toBeLessThan(1e-6);
    // The two version-1 tokens moved by 0.1 and 0.05: the off-policy gap, not a parity failure.
    expect(metrics['offpolicy/tokens']).toBe(2);
    expect(metrics['offpolicy/logprob_abs_diff_max']).toBeCloseTo(0.1, 5);
    expect(metrics['offpolicy/logprob_abs_diff']).toBeCloseTo(0.075, 5);
    expect(metrics['offpolicy/logprob_diff_mean']).toBeCloseTo(0.025, 5);
  });

  it("takes a remote trainer's own parity only when every token is on-policy", () => {
    const trainerParity = { mean: 1e-7, max: 2e-7 };
    const stale = tokenVersionStatistics({
      samples,
      batch,
      history,
      trainerVersion: '2',
      trainLogProbs: null,
      trainerParity,
    });
    expect(stale.parityMax).toBeNull();
    expect(stale.metrics['parity/logprob_abs_diff_max']).toBeUndefined();
    const current = tokenVersionStatistics({
      samples: samples.slice(1),
      batch: packed(samples.slice(1)),
      history,
      trainerVersion: '2',
      trainLogProbs: null,
      trainerParity,
    });
    expect(current.parityMax).toBe(2e-7);
    expect(current.gapMean).toBe(0);
  });

  it('counts tokens of versions the run never served as unknown', () => {
    const { metrics, gapMean } = tokenVersionStatistics({
      samples,
      batch,
      history: new VersionHistory('7'),
      trainerVersion: '7',
      trainLogProbs: null,
    });
    expect(gapMean).toBeNull();
    expect(metrics['version_gap/unknown_tokens']).toBe(5);
  });
});
