import type { RoutedExpertsChunk } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { failure } from './__fixtures__/failure.js';
import { segment, template } from './__fixtures__/segments.js';
import { expandSegmentsToSamples } from './expand.js';
import { decodeRoutedExperts, type RoutedExperts, zeroRoutedExperts } from './routed-experts.js';
import { writeSampleFromSegment } from './write-sample.js';

const shape = { numLayers: 2, moeRouterTopk: 3 };
const width = shape.numLayers * shape.moeRouterTopk;

// Row r holds ids r*10 + slot: easy to recognise after concatenation and cuts.
function rowIds(from: number, to: number): number[] {
  const ids: number[] = [];
  for (let row = from; row < to; row++) for (let slot = 0; slot < width; slot++) ids.push(row * 10 + slot);
  return ids;
}

function chunk(from: number, to: number, dtype: RoutedExpertsChunk['dtype'] = 'int32'): RoutedExpertsChunk {
  const ids = rowIds(from, to);
  const array =
    dtype === 'uint8'
      ? Uint8Array.from(ids)
      : dtype === 'uint16'
        ? Uint16Array.from(ids)
        : Int32Array.from(ids);
  return {
    data: Buffer.from(array.buffer, array.byteOffset, array.byteLength).toString('base64'),
    row_count: to - from,
    dtype,
  };
}

describe('decodeRoutedExperts', () => {
  it('decodes every dtype to int32 rows of numLayers × topk', () => {
    for (const dtype of ['uint8', 'uint16', 'int32'] as const) {
      const routed = decodeRoutedExperts([chunk(0, 4, dtype)], shape, 5, 'segment 0') as RoutedExperts;
      expect(routed.rows).toBe(4);
      expect(routed.numLayers).toBe(2);
      expect(routed.topk).toBe(3);
      expect(routed.ids).toBeInstanceOf(Int32Array);
      expect(Array.from(routed.ids)).toEqual(rowIds(0, 4));
    }
  });

  it('concatenates chunks in order and cuts to len(tokens) - 1 rows', () => {
    const routed = decodeRoutedExperts(
      [chunk(0, 2, 'uint16'), chunk(2, 3, 'uint16'), chunk(3, 6, 'uint16')],
      shape,
      5,
      'segment 0',
    ) as RoutedExperts;
    expect(routed.rows).toBe(4);
    expect(Array.from(routed.ids)).toEqual(rowIds(0, 4));
  });

  it('is null without chunks', () => {
    expect(decodeRoutedExperts(undefined, shape, 5, 's')).toBeNull();
    expect(decodeRoutedExperts([], shape, 5, 's')).toBeNull();
  });

  it('names the segment and field of every bad payload', () => {
    // Field types are the chunk schema's (`routedExpertsChunkSchema`); what it cannot see is checked here.
    const cases: [RoutedExpertsChunk[], string][] = [
      [[chunk(0, 2), { ...chunk(2, 4), row_count: 3 }], 'routed_experts_chunks[1] decodes to 2 rows'],
      [[chunk(0, 3)], 'hold 3 rows but its 5 tokens need 4'],
      [[{ ...chunk(0, 4), data: 'not base64!' }], 'routed_experts_chunks[0].data is not base64'],
      [[{ data: Buffer.from([1, 2, 3]).toString('base64'), row_count: 1, dtype: 'uint8' }], 'not whole rows'],
    ];
    for (const [chunks, message] of cases) {
      const error = failure(() => decodeRoutedExperts(chunks, shape, 5, 'segment 2 of session s'));
      expect(error.code).toBe('invalid_argument');
      expect(error.message).toContain('segment 2 of session s');
      expect(error.message).toContain(message);
    }
    expect(
      failure(() => decodeRoutedExperts([chunk(0, 4)], { numLayers: 0, moeRouterTopk: 3 }, 5, 's')).message,
    ).toContain('numLayers');
  });

  it('builds zero rows for placeholders', () => {
    const zero = zeroRoutedExperts(3, shape);
    expect(zero.rows).toBe(3);
    expect(zero.ids).toEqual(new Int32Array(18));
    expect(zeroRoutedExperts(-1, shape).rows).toBe(0);
  });
});

describe('writeSampleFromSegment with routed experts', () => {
  const options = { ...shape, useRolloutRoutingReplay: true };

  it('decodes the segment’s chunks to rollout_routed_experts', () => {
    const input = segment(0, [0, 1, 1, 1, 1], {
      routed_experts_chunks: [chunk(0, 2, 'uint8'), chunk(2, 4, 'uint8')],
    });
    const sample = writeSampleFromSegment(template(), input, options);
    const routed = sample.rollout_routed_experts as RoutedExperts;
    expect(routed.rows).toBe(4);
    expect(Array.from(routed.ids)).toEqual(rowIds(0, 4));
  });

  it('cuts the rows with the token cap', () => {
    const input = segment(0, [0, 1, 1, 1, 1, 1], { routed_experts_chunks: [chunk(0, 5)] });
    const sample = writeSampleFromSegment(template(), input, { ...options, maxTokensPerGpu: 3 });
    expect(sample.tokens).toHaveLength(3);
    const routed = sample.rollout_routed_experts as RoutedExperts;
    expect(routed.rows).toBe(2);
    expect(Array.from(routed.ids)).toEqual(rowIds(0, 2));
  });

  it('with replay on, a segment without chunks or a model shape is an error', () => {
    const missing = failure(() => writeSampleFromSegment(template(), segment(3, [0, 1]), options));
    expect(missing.message).toContain('segment 3 of session session-1');
    expect(missing.message).toContain('--use-rollout-routing-replay');
    const noShape = failure(() =>
      writeSampleFromSegment(template(), segment(0, [0, 1], { routed_experts_chunks: [chunk(0, 1)] }), {
        useRolloutRoutingReplay: true,
      }),
    );
    expect(noShape.message).toContain('numLayers');
  });

  it('with replay off, chunks are decoded when the shape is known and ignored otherwise', () => {
    const input = segment(0, [0, 1, 1], { routed_experts_chunks: [chunk(0, 2)] });
    expect(writeSampleFromSegment(template(), input).rollout_routed_experts).toBeNull();
    expect(
      (writeSampleFromSegment(template(), input, shape).rollout_routed_experts as RoutedExperts).rows,
    ).toBe(2);
    // A template's stale routing never leaks into a sample.
    const stale = template({ rollout_routed_experts: zeroRoutedExperts(9, shape) });
    expect(writeSampleFromSegment(stale, segment(0, [0, 1])).rollout_routed_experts).toBeNull();
  });

  it('reaches every sample of an expansion', () => {
    const samples = expandSegmentsToSamples(
      template(),
      [
        segment(1, [0, 1, 1], { routed_experts_chunks: [chunk(0, 2)] }),
        segment(0, [0, 0, 1, 1], { routed_experts_chunks: [chunk(0, 3, 'uint16')] }),
      ],
      options,
    );
    expect(samples.map((sample) => (sample.rollout_routed_experts as RoutedExperts).rows)).toEqual([3, 2]);
  });
});
