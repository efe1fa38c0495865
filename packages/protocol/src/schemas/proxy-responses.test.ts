import { describe, expect, it } from 'vitest';
import { lineageSegment, timelineSegment } from './__fixtures__/payloads.js';
import {
  type TrajectoryReadResponse,
  trajectoryReadResponseSchema,
  trajectoryReadShapeSchema,
  trajectoryReadToJson,
} from './proxy-responses.js';
import { segmentShapeSchema } from './segment.js';

const stats = { total_items: 2, total_instances: 1, ready_instances: 0 };

describe('/trajectory/read', () => {
  it('a client reads segments into typed arrays, keeping every logprob exactly', () => {
    const record = {
      ...lineageSegment(),
      full_logprobs: lineageSegment().full_logprobs.map((value, index) => (index % 2 ? value : -0.1234567)),
    };
    const read = trajectoryReadShapeSchema.parse({
      success: true,
      mode: 'trajectory',
      data: [record],
      meta_info: stats,
      drained: true,
    });
    if (read.mode !== 'trajectory') throw new Error('expected trajectory mode');
    const [segment] = read.data;
    expect(segment?.tokens).toBeInstanceOf(Int32Array);
    expect(segment?.full_loss_mask).toBeInstanceOf(Uint8Array);
    expect(Array.from(segment?.tokens ?? [])).toEqual(record.tokens);
    expect(Array.from(segment?.full_logprobs ?? [])).toEqual(record.full_logprobs);
    expect(Array.from(segment?.full_loss_mask ?? [])).toEqual(record.full_loss_mask);
    expect(segment?.extra_info.segment_view).toBe('lineage');
  });

  it('checks the shape, not every token: lengths and counts are checked, token values are not', () => {
    const short = { ...timelineSegment(), full_loss_mask: timelineSegment().full_loss_mask.slice(1) };
    const result = segmentShapeSchema.safeParse(short);
    expect(result.success).toBe(false);
    expect(result.error?.issues.map((issue) => issue.path.join('.'))).toContain('full_loss_mask');
    const notArray = segmentShapeSchema.safeParse({ ...timelineSegment(), tokens: 'abc' });
    expect(notArray.error?.issues.map((issue) => issue.path.join('.'))).toEqual(['tokens']);
  });

  it('checks every loss-mask entry and every routed-expert chunk: they decide what is trained', () => {
    const record = timelineSegment();
    const mask = [...record.full_loss_mask];
    mask[mask.length - 1] = 2;
    const badMask = segmentShapeSchema.safeParse({ ...record, full_loss_mask: mask });
    expect(badMask.error?.issues.map((issue) => issue.path.join('.'))).toEqual([
      `full_loss_mask.${mask.length - 1}`,
    ]);
    const badChunk = segmentShapeSchema.safeParse({
      ...record,
      routed_experts_chunks: [{ data: 'AAAA', row_count: 1, dtype: 'int64' }],
    });
    expect(badChunk.error?.issues.map((issue) => issue.path.join('.'))).toEqual([
      'routed_experts_chunks.0.dtype',
    ]);
  });

  it('writes typed segments as the JSON the full schema accepts, in both modes', () => {
    const parsed = trajectoryReadShapeSchema.parse({
      success: true,
      mode: 'trajectory',
      data: [lineageSegment(), timelineSegment()],
      meta_info: stats,
      drained: false,
    });
    const text = trajectoryReadToJson(parsed);
    const again = trajectoryReadResponseSchema.parse(JSON.parse(text));
    expect(again.data).toEqual(
      [lineageSegment(), timelineSegment()].map((record) => expect.objectContaining(record)),
    );
    const batch: TrajectoryReadResponse = {
      success: true,
      mode: 'batch',
      data: parsed.mode === 'trajectory' ? [parsed.data] : [],
      meta_info: stats,
    };
    const batchAgain = trajectoryReadResponseSchema.parse(JSON.parse(trajectoryReadToJson(batch)));
    expect(batchAgain.mode).toBe('batch');
    expect(batchAgain.data).toHaveLength(1);
  });

  it('writes a non-finite logprob as null, as JSON.stringify would', () => {
    const parsed = segmentShapeSchema.parse(lineageSegment());
    parsed.full_logprobs[0] = Number.NaN;
    const text = trajectoryReadToJson({
      success: true,
      mode: 'trajectory',
      data: [parsed],
      meta_info: stats,
      drained: false,
    });
    expect(JSON.parse(text).data[0].full_logprobs[0]).toBeNull();
  });
});
