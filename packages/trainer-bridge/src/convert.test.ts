import { expandSegmentsToSamples, markAbortedNoGrad } from '@dressage/multi-segment';
import {
  createSample,
  DressageError,
  type Sample,
  type Segment,
  trainBatchSchema,
  unpackTrainBatch,
} from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { assignRolloutIds, convertSamplesToPackedTrainBatch, convertSamplesToTrainData } from './convert.js';

interface PartOptions {
  prompt?: string;
  trajectory?: string;
  segmentIndex?: number;
  rolloutId?: number | null;
  fields?: Parameters<typeof createSample>[0];
}

// One finalized segment of two as `ProxyClient.readTrajectory` returns it: tokens [1, 2, 3], the
// last two trainable.
function proxySegment(segmentIndex: number, sessionId: string): Segment {
  return {
    uid: `${sessionId}-${segmentIndex}`,
    session_id: sessionId,
    trajectory_id: sessionId,
    turn_id: null,
    instance_id: 'p',
    segment_index: segmentIndex,
    segment_count: 2,
    messages: [{ role: 'assistant', content: 'done' }],
    tools: null,
    tokens: Int32Array.of(1, 2, 3),
    full_logprobs: Float64Array.of(0, -0.1, -0.2),
    full_loss_mask: Uint8Array.of(0, 1, 1),
    aligned_response_length: 2,
    finish_reason: 'stop',
    timestamp: 1,
    extra_info: {
      token_build_mode: 'tito',
      context_token_count: 1,
      output_token_count: 2,
      num_steps: 1,
      lineage_id: 'l',
      lineage_index: 0,
      segment_reason: 'initial',
      segment_reasons: ['initial'],
      finalization_complete: true,
      finalization_id: 'f',
      segment_view: 'lineage',
      alignment_method: 'tito',
      context_delta_token_count: 0,
      num_turns: 1,
      turn_ids: [],
      branch_from_step_id: null,
      step_ids: ['step'],
      timestamp: '1',
      history_rewritten: false,
      trajectory_num_segments: 2,
    },
  };
}

let nextIndex = 0;
function part(mask: (0 | 1)[], options: PartOptions = {}): Sample {
  const index = nextIndex++;
  const prompt = options.prompt ?? 'p1';
  return createSample({
    index,
    group_index: Number(prompt.replace(/\D/g, '')) || 0,
    rollout_id: options.rolloutId === undefined ? index : options.rolloutId,
    tokens: [9, 9, ...mask.map((_, i) => 100 + i)],
    response_length: mask.length,
    loss_mask: mask,
    rollout_log_probs: mask.map((value) => (value ? -0.5 : 0)),
    reward: 1,
    ...options.fields,
    metadata: {
      parent_traj_id: options.trajectory ?? `t-${index}`,
      instance_id: prompt,
      segment_index: options.segmentIndex ?? 0,
      ...(options.fields?.metadata ?? {}),
    },
  });
}

function failure(run: () => unknown): DressageError {
  try {
    run();
  } catch (error) {
    expect(DressageError.isInstance(error)).toBe(true);
    return error as DressageError;
  }
  throw new Error('expected an error');
}

describe('convertSamplesToTrainData: prompt-equal denominators', () => {
  it('worked example: [3.5, 3.5, 3.5, 2.0]', () => {
    const samples = [
      part([1, 1, 1], { prompt: 'p1', trajectory: 't1', segmentIndex: 0, rolloutId: 0 }),
      part([1, 0, 1], { prompt: 'p1', trajectory: 't1', segmentIndex: 1, rolloutId: 0 }),
      part([1, 1], { prompt: 'p1', trajectory: 't2', rolloutId: 1 }),
      part([1, 1, 1, 1], { prompt: 'p2', trajectory: 't3', rolloutId: 2 }),
    ];
    expect(convertSamplesToTrainData(samples, { globalBatchSize: 4 }).rollout_mask_sums).toEqual([
      3.5, 3.5, 3.5, 2,
    ]);
  });

  it('documentation example: 100 + 150 tokens → 125 each, 200 tokens → 100', () => {
    const ones = (length: number) => new Array<0 | 1>(length).fill(1);
    const samples = [
      part(ones(100), { prompt: 'p1', trajectory: 't1', segmentIndex: 0, rolloutId: 0 }),
      part(ones(150), { prompt: 'p1', trajectory: 't1', segmentIndex: 1, rolloutId: 0 }),
      part(ones(200), { prompt: 'p2', trajectory: 't2', rolloutId: 1 }),
    ];
    const batch = convertSamplesToTrainData(samples, { globalBatchSize: 4 });
    expect(batch.rollout_mask_sums).toEqual([125, 125, 100]);
  });

  it('gives dead samples their live prompt’s value, or 0 when the prompt has no live sample', () => {
    const samples = [
      part([1, 1], { prompt: 'p1' }),
      part([1, 1, 1], { prompt: 'p1', fields: { remove_sample: true } }),
      part([1], { prompt: 'p2', fields: { remove_sample: true } }),
    ];
    const batch = convertSamplesToTrainData(samples, { globalBatchSize: 2 });
    // Only p1 is live: M = 2 (the removed sample's tokens do not count), N = 1.
    expect(batch.rollout_mask_sums).toEqual([1, 1, 0]);
    expect(batch.loss_masks).toEqual([[1, 1], [0, 0, 0], [0]]);
  });

  it('does not count a prompt whose live samples train no token', () => {
    const samples = [part([1, 1], { prompt: 'p1' }), part([0, 0], { prompt: 'p2' })];
    expect(convertSamplesToTrainData(samples, { globalBatchSize: 1 }).rollout_mask_sums).toEqual([2, 0]);
  });

  it('uses the same denominators for REINFORCE++-baseline', () => {
    const samples = [part([1, 1], { prompt: 'p1' }), part([1], { prompt: 'p2' })];
    expect(
      convertSamplesToTrainData(samples, {
        globalBatchSize: 2,
        advantageEstimator: 'reinforce_plus_plus_baseline',
      }).rollout_mask_sums,
    ).toEqual([2, 1]);
  });

  it('keeps denominators below 1 exact instead of clamping them', () => {
    const samples = [part([1], { prompt: 'p1' }), part([0, 1, 1], { prompt: 'p2' })];
    expect(convertSamplesToTrainData(samples, { globalBatchSize: 8 }).rollout_mask_sums).toEqual([0.25, 0.5]);
  });
});

describe('convertSamplesToTrainData: trajectory-equal denominators', () => {
  it('sums the trainable tokens of each rollout for other estimators', () => {
    const samples = [
      part([1, 1, 1], { rolloutId: 0 }),
      part([1, 0, 1], { rolloutId: 0 }),
      part([1, 1], { rolloutId: 1, fields: { remove_sample: true } }),
      part([1], { rolloutId: null }),
    ];
    for (const advantageEstimator of ['gspo', 'ppo', 'reinforce_plus_plus', 'cispo'] as const) {
      expect(convertSamplesToTrainData(samples, { advantageEstimator }).rollout_mask_sums).toEqual([
        5, 5, 0, 1,
      ]);
    }
  });
});

describe('convertSamplesToTrainData: keys', () => {
  it('fills every train_data key', () => {
    const samples = [
      part([1, 0], { trajectory: 't', segmentIndex: 0, rolloutId: 3, fields: { reward: 0 } }),
      part([1], {
        trajectory: 't',
        segmentIndex: 1,
        rolloutId: 3,
        fields: { reward: 2, status: 'truncated', metadata: { source_name: 'swe' } },
      }),
      part([1, 1], { prompt: 'p1', rolloutId: null, fields: { reward: 4 } }),
    ];
    const batch = convertSamplesToTrainData(samples, { globalBatchSize: 2 });
    expect(trainBatchSchema.safeParse(batch).success).toBe(true);
    expect(batch.tokens).toEqual(samples.map((sample) => sample.tokens));
    expect(batch.response_lengths).toEqual([2, 1, 2]);
    expect(batch.raw_reward).toEqual([0, 2, 4]);
    expect(batch.rewards).toEqual([-1, -1, 1]);
    expect(batch.truncated).toEqual([0, 1, 0]);
    expect(batch.sample_indices).toEqual(samples.map((sample) => sample.index));
    expect(batch.rollout_ids).toEqual([3, 3, 0]);
    expect(batch.loss_masks).toEqual([[1, 0], [1], [1, 1]]);
    expect(batch.rollout_log_probs).toEqual([[-0.5, 0], [-0.5], [-0.5, -0.5]]);
    expect(batch.source_names).toEqual(['unknown', 'swe', 'unknown']);
    expect(batch.round_number).toBeUndefined();
    expect(batch.metadata).toBeUndefined();
  });

  it('converts an empty batch to empty columns', () => {
    const batch = convertSamplesToTrainData([], { globalBatchSize: 4 });
    expect(batch.tokens).toEqual([]);
    expect(batch.rollout_mask_sums).toEqual([]);
    expect(convertSamplesToPackedTrainBatch([], { globalBatchSize: 4 }).sample_count).toBe(0);
  });

  it('shares the large per-token arrays with the samples instead of copying them', () => {
    const sample = part([1, 0]);
    const batch = convertSamplesToTrainData([sample], { globalBatchSize: 1 });
    expect(batch.tokens[0]).toBe(sample.tokens);
    expect(batch.loss_masks[0]).toBe(sample.loss_mask);
    expect(batch.rollout_log_probs?.[0]).toBe(sample.rollout_log_probs);
  });

  it('treats a missing loss mask as all ones', () => {
    const sample = part([1, 1, 1], { fields: { loss_mask: null } });
    const batch = convertSamplesToTrainData([sample], { globalBatchSize: 1 });
    expect(batch.loss_masks).toEqual([[1, 1, 1]]);
    expect(batch.rollout_mask_sums).toEqual([3]);
  });

  it('fills unset rollout ids with the smallest unused integers', () => {
    expect(
      assignRolloutIds([
        { rollout_id: null },
        { rollout_id: 1 },
        { rollout_id: null },
        { rollout_id: 0 },
        { rollout_id: null },
      ]),
    ).toEqual([2, 1, 3, 0, 4]);
  });

  it('overrides raw_reward with metadata.raw_reward where present', () => {
    const samples = [
      part([1], { fields: { reward: 1, metadata: { raw_reward: 0.25 } } }),
      part([1], { fields: { reward: 3 } }),
    ];
    const batch = convertSamplesToTrainData(samples, { globalBatchSize: 2 });
    expect(batch.raw_reward).toEqual([0.25, 3]);
    // Normalisation still uses the rewards themselves.
    expect(batch.rewards).toEqual([-1, 1]);
  });

  it('passes round numbers, train metadata and teacher logprobs through', () => {
    const samples = [
      part([1], {
        fields: { teacher_log_probs: [-1], train_metadata: { a: 1 }, metadata: { round_number: 2 } },
      }),
      part([1, 1], { fields: { teacher_log_probs: [-2, -3], metadata: { round_number: 3 } } }),
    ];
    const batch = convertSamplesToTrainData(samples, { globalBatchSize: 2 });
    expect(batch.round_number).toEqual([2, 3]);
    expect(batch.metadata).toEqual([{ a: 1 }, {}]);
    expect(batch.teacher_log_probs).toEqual([[-1], [-2, -3]]);
  });

  it('runs end to end from segments, with a failed trajectory kept as a placeholder', () => {
    const template = createSample({
      index: 0,
      group_index: 0,
      session_id: 's-0',
      metadata: { instance_id: 'p' },
    });
    const segments = [0, 1].map((segment_index) => proxySegment(segment_index, 's-0'));
    const expanded = expandSegmentsToSamples(template, segments);
    expanded[1]!.reward = 1;
    const failed = markAbortedNoGrad(
      createSample({ index: 1, group_index: 0, session_id: 's-1', metadata: { instance_id: 'p' } }),
    );
    const other = expandSegmentsToSamples({ ...template, index: 2, session_id: 's-2' }, [segments[0]!]);
    other[0]!.reward = 0;
    const packed = convertSamplesToPackedTrainBatch([...expanded, failed, ...other], { globalBatchSize: 2 });
    expect(packed.sample_count).toBe(4);
    expect(Array.from(packed.rollout_ids)).toEqual([0, 0, 1, 2]);
    expect(Array.from(packed.response_lengths)).toEqual([2, 2, 0, 2]);
    // One live prompt with 6 trainable tokens, N = 1, gbs = 2.
    expect(Array.from(packed.rollout_mask_sums)).toEqual([3, 3, 3, 3]);
    expect(Array.from(packed.rewards)).toEqual([1, 1, 0, -1]);
    expect(Array.from(packed.loss_masks)).toEqual([1, 1, 1, 1, 1, 1]);
    expect(unpackTrainBatch(packed).tokens).toEqual([[1, 2, 3], [1, 2, 3], [0], [1, 2, 3]]);
  });

  it('packs into typed arrays that unpack to the same batch', () => {
    const samples = [part([1, 0, 1], { fields: { status: 'truncated' } }), part([1], { prompt: 'p2' })];
    const batch = convertSamplesToTrainData(samples, { globalBatchSize: 2 });
    const packed = convertSamplesToPackedTrainBatch(samples, { globalBatchSize: 2 });
    expect(packed.tokens).toBeInstanceOf(Int32Array);
    expect(packed.loss_masks).toBeInstanceOf(Uint8Array);
    expect(packed.rollout_log_probs).toBeInstanceOf(Float32Array);
    const unpacked = unpackTrainBatch(packed);
    expect(unpacked.tokens).toEqual(batch.tokens);
    expect(unpacked.loss_masks).toEqual(batch.loss_masks);
    expect(unpacked.rollout_mask_sums).toEqual(batch.rollout_mask_sums);
    expect(unpacked.truncated).toEqual([1, 0]);
  });
});

describe('convertSamplesToTrainData: errors name the sample', () => {
  it('requires parent and instance ids for prompt-equal denominators', () => {
    const orphan = part([1]);
    delete orphan.metadata.parent_traj_id;
    expect(failure(() => convertSamplesToTrainData([orphan], { globalBatchSize: 1 })).message).toContain(
      `sample (index ${orphan.index}, group 1, segment 0) has no metadata.parent_traj_id`,
    );
    const noInstance = part([1], { trajectory: 's-7' });
    delete noInstance.metadata.instance_id;
    const error = failure(() => convertSamplesToTrainData([noInstance], { globalBatchSize: 1 }));
    expect(error.code).toBe('failed_precondition');
    expect(error.message).toContain('session s-7');
    expect(error.message).toContain('has no metadata.instance_id');
    // Trajectory-equal conversion does not need them.
    expect(convertSamplesToTrainData([orphan], { advantageEstimator: 'ppo' }).rollout_mask_sums).toEqual([1]);
  });

  it('requires group_index on live samples and a global batch size', () => {
    const noGroup = part([1], { fields: { group_index: null } });
    expect(failure(() => convertSamplesToTrainData([noGroup], { globalBatchSize: 1 })).message).toContain(
      'has no group_index',
    );
    expect(failure(() => convertSamplesToTrainData([part([1])])).message).toContain(
      'globalBatchSize is required',
    );
  });

  it('rejects inconsistent masks, lengths and logprobs', () => {
    const cases: [Sample, string][] = [
      [{ ...part([1, 1]), loss_mask: [1] }, 'loss_mask has 1 entries but response_length is 2'],
      [{ ...part([1, 1]), loss_mask: [1, 2 as 1] }, 'loss_mask[1] is 2'],
      [{ ...part([1]), tokens: [] }, 'has no tokens'],
      [{ ...part([1]), response_length: 9 }, 'response_length 9 does not fit its 3 tokens'],
      [
        { ...part([1, 1]), rollout_log_probs: [0] },
        'rollout_log_probs has 1 entries but response_length is 2',
      ],
    ];
    for (const [sample, message] of cases) {
      const error = failure(() => convertSamplesToTrainData([sample], { globalBatchSize: 1 }));
      expect(error.message).toContain(`index ${sample.index}`);
      expect(error.message).toContain(message);
    }
    const withoutLogprobs = { ...part([1]), rollout_log_probs: null };
    expect(
      failure(() => convertSamplesToTrainData([part([1]), withoutLogprobs], { globalBatchSize: 1 })).message,
    ).toContain('has no rollout_log_probs while other samples of the batch have them');
    const mixedRounds = [part([1], { fields: { metadata: { round_number: 1 } } }), part([1])];
    expect(failure(() => convertSamplesToTrainData(mixedRounds, { globalBatchSize: 1 })).message).toContain(
      'metadata.round_number is undefined',
    );
  });

  it('fills zero logprobs for removed samples that lack them', () => {
    const removed = { ...part([1, 1], { fields: { remove_sample: true } }), rollout_log_probs: null };
    const batch = convertSamplesToTrainData([part([1]), removed], { globalBatchSize: 1 });
    expect(batch.rollout_log_probs).toEqual([[-0.5], [0, 0]]);
  });
});

describe('convertSamplesToTrainData: custom reward post-processing', () => {
  it('uses the given function instead of group normalisation, with the resolved options', () => {
    const samples = [part([1, 1]), part([1, 0]), part([1])];
    const seen: unknown[] = [];
    const data = convertSamplesToTrainData(samples, {
      globalBatchSize: 3,
      rewardPostProcess: (given, options) => {
        seen.push(given.length, options.advantageEstimator, options.globalBatchSize);
        return { rawRewards: [5, 6, 7], rewards: [0.5, -0.25, 2] };
      },
    });
    expect(seen).toEqual([3, 'grpo', 3]);
    expect(data.rewards).toEqual([0.5, -0.25, 2]);
    expect(data.raw_reward).toEqual([5, 6, 7]);
  });
});

describe('convertSamplesToTrainData: routed experts (R3)', () => {
  const shape = { numLayers: 2, moeRouterTopk: 2 };
  const replay = { globalBatchSize: 2, useRolloutRoutingReplay: true, ...shape };
  const routed = (rows: number, fill: number) => ({
    rows,
    numLayers: 2,
    topk: 2,
    ids: new Int32Array(rows * 4).fill(fill),
  });

  it('carries each sample’s rows and zero-fills a removed sample without any', () => {
    const live = part([1, 1], { prompt: 'p1', fields: { rollout_routed_experts: routed(3, 7) } });
    const dead = markAbortedNoGrad(part([1], { prompt: 'p1' }), { sessionId: 'dead', instanceId: 'p1' });
    const batch = convertSamplesToTrainData([live, dead], replay);
    const [first, second] = batch.rollout_routed_experts as ReturnType<typeof routed>[];
    expect(first).toBe(live.rollout_routed_experts);
    // tokens [9, 9, 100] → two rows of 2 × 2 zeros.
    expect(second).toEqual({ rows: 2, numLayers: 2, topk: 2, ids: new Int32Array(8) });
  });

  it('rejects a live sample without rows, rows that do not fit its tokens, and a missing shape', () => {
    const bare = part([1, 1], { prompt: 'p1' });
    expect(failure(() => convertSamplesToTrainData([bare], replay)).message).toContain(
      'has no rollout_routed_experts',
    );
    const short = part([1, 1], { prompt: 'p1', fields: { rollout_routed_experts: routed(2, 1) } });
    expect(failure(() => convertSamplesToTrainData([short], replay)).message).toContain(
      'is 2 rows of 2 × 2, expected 3 rows',
    );
    const good = part([1, 1], { prompt: 'p1', fields: { rollout_routed_experts: routed(3, 1) } });
    expect(
      failure(() => convertSamplesToTrainData([good], { globalBatchSize: 2, useRolloutRoutingReplay: true }))
        .message,
    ).toContain('numLayers');
  });
});
