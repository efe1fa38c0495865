import { SampleStatus } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { failure } from './__fixtures__/failure.js';
import { segment, template } from './__fixtures__/segments.js';
import { tokenCap, writeSampleFromSegment } from './write-sample.js';

describe('writeSampleFromSegment', () => {
  it('splits the segment at its first trainable token', () => {
    const input = segment(0, [0, 0, 1, 1, 0, 1]);
    const sample = writeSampleFromSegment(template(), input);
    expect(sample.tokens).toEqual([100, 101, 102, 103, 104, 105]);
    expect(sample.response_length).toBe(4);
    expect(sample.loss_mask).toEqual([1, 1, 0, 1]);
    expect(sample.rollout_log_probs).toEqual([-0.1, -0.1, 0, -0.1]);
    expect(sample.response).toBe('reply 0');
    expect(sample.status).toBe(SampleStatus.COMPLETED);
    expect(sample.tokens).not.toBe(input.tokens);
  });

  it('writes the segment metadata', () => {
    const sample = writeSampleFromSegment(template(), segment(2, [0, 1], { segment_count: 3 }));
    expect(sample.metadata).toMatchObject({
      instance_id: 'instance-1',
      session_id: 'session-1',
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'reply 2' },
      ],
      proxy_extra_info: { segment_view: 'lineage' },
      segment_count: 3,
      selected_segment_index: 2,
      all_segment_uids: ['uid-2'],
    });
    expect(sample.metadata.truncated).toBeUndefined();
    expect(sample.metadata.full_versions).toBeUndefined();
  });

  it('prefers explicit session, instance, count and uids', () => {
    const sample = writeSampleFromSegment(template(), segment(0, [0, 1]), {
      sessionId: 's-x',
      instanceId: 'i-x',
      segmentCount: 4,
      allSegmentUids: ['a', 'b'],
    });
    expect(sample.metadata).toMatchObject({
      session_id: 's-x',
      instance_id: 'i-x',
      segment_count: 4,
      all_segment_uids: ['a', 'b'],
    });
  });

  it('leaves the template untouched and shares no nested objects with it', () => {
    const base = template({ metadata: { instance_id: 'instance-1', nested: { a: 1 } } });
    const before = structuredClone(base);
    const sample = writeSampleFromSegment(base, segment(0, [0, 1]));
    expect(base).toEqual(before);
    expect(sample.metadata.nested).toEqual({ a: 1 });
    expect(sample.metadata.nested).not.toBe(base.metadata.nested);
    expect(sample.spec_info).not.toBe(base.spec_info);
  });

  it('has an empty response when no token is trainable', () => {
    const sample = writeSampleFromSegment(template(), segment(0, [0, 0, 0]));
    expect(sample.tokens).toHaveLength(3);
    expect(sample.response_length).toBe(0);
    expect(sample.loss_mask).toEqual([]);
    expect(sample.rollout_log_probs).toEqual([]);
  });

  it('marks a length-limited generation as truncated', () => {
    const sample = writeSampleFromSegment(template(), segment(0, [0, 1], { finish_reason: 'length' }));
    expect(sample.status).toBe(SampleStatus.TRUNCATED);
    expect(sample.metadata.finish_reason).toBe('length');
    const continued = writeSampleFromSegment(
      sample,
      segment(0, [0, 1], { finish_reason: 'segment_boundary' }),
    );
    expect([continued.status, continued.metadata.finish_reason]).toEqual([
      SampleStatus.COMPLETED,
      'segment_boundary',
    ]);
  });

  it('takes the last assistant message, joining text parts, else the agent response', () => {
    const parts = segment(0, [0, 1], {
      messages: [
        { role: 'assistant', content: 'old' },
        {
          role: 'assistant',
          content: [{ type: 'text', text: 'a' }, { type: 'image_url' }, { type: 'text', text: 'b' }],
        },
        { role: 'tool', content: 'result' },
      ],
    });
    expect(writeSampleFromSegment(template(), parts).response).toBe('ab');
    const none = segment(0, [0, 1], { messages: [{ role: 'user', content: 'x' }] });
    expect(writeSampleFromSegment(template(), none, { agentResponse: 'final answer' }).response).toBe(
      'final answer',
    );
    expect(writeSampleFromSegment(template(), none).response).toBe('');
  });

  it('skips an assistant message that ended on a tool call (content null) for the last one with text', () => {
    const input = segment(0, [0, 1], {
      messages: [
        { role: 'user', content: 'weather in Paris?' },
        { role: 'assistant', content: 'The answer is 42' },
        { role: 'user', content: 'and now?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
        { role: 'tool', content: 'sunny', tool_call_id: 'c1' },
      ],
    });
    const sample = writeSampleFromSegment(template(), input, { agentResponse: 'fallback' });
    expect(sample.response).toBe('The answer is 42');
    // An empty text is a reply: it is taken, not skipped.
    const empty = segment(0, [0, 1], {
      messages: [
        { role: 'assistant', content: 'old' },
        { role: 'assistant', content: '' },
      ],
    });
    expect(writeSampleFromSegment(template(), empty, { agentResponse: 'fallback' }).response).toBe('');
    const onlyCalls = segment(0, [0, 1], { messages: [{ role: 'assistant', content: null }] });
    expect(writeSampleFromSegment(template(), onlyCalls, { agentResponse: 'fallback' }).response).toBe(
      'fallback',
    );
  });

  it('truncates to max_tokens_per_gpu × context-parallel size', () => {
    const input = segment(0, [0, 0, 1, 1, 1, 1, 1, 1], {
      full_versions: ['-1', '-1', '1', '1', '1', '2', '2', '2'],
    });
    const sample = writeSampleFromSegment(template(), input, { maxTokensPerGpu: 3, contextParallelSize: 2 });
    expect(sample.tokens).toEqual([100, 101, 102, 103, 104, 105]);
    expect(sample.response_length).toBe(4);
    expect(sample.loss_mask).toEqual([1, 1, 1, 1]);
    expect(sample.metadata.truncated).toBe(true);
    expect(sample.metadata.full_versions).toEqual(['-1', '-1', '1', '1', '1', '2']);
    const fits = writeSampleFromSegment(template(), input, { maxTokensPerGpu: 8 });
    expect(fits.tokens).toHaveLength(8);
    expect(fits.metadata.truncated).toBeUndefined();
  });

  it('truncates before the first trainable token to an empty response', () => {
    const sample = writeSampleFromSegment(template(), segment(0, [0, 0, 0, 1]), { maxTokensPerGpu: 2 });
    expect(sample.tokens).toEqual([100, 101]);
    expect(sample.response_length).toBe(0);
    expect(sample.metadata.truncated).toBe(true);
  });

  it('rejects a token cap that is not a positive integer', () => {
    expect(tokenCap({})).toBeNull();
    expect(tokenCap({ maxTokensPerGpu: 4 })).toBe(4);
    expect(tokenCap({ maxTokensPerGpu: 4, contextParallelSize: 3 })).toBe(12);
    expect(failure(() => tokenCap({ maxTokensPerGpu: 0 })).message).toContain('maxTokensPerGpu');
    expect(failure(() => tokenCap({ maxTokensPerGpu: 2.5 })).code).toBe('invalid_argument');
    expect(failure(() => tokenCap({ maxTokensPerGpu: 2, contextParallelSize: 0 })).message).toContain(
      'contextParallelSize',
    );
  });

  it('reads the typed arrays of a Segment into the plain arrays a sample keeps', () => {
    const input = segment(0, [0, 1, 1]);
    expect(input.tokens).toBeInstanceOf(Int32Array);
    const sample = writeSampleFromSegment(template(), input);
    expect(Array.isArray(sample.tokens)).toBe(true);
    expect(Array.isArray(sample.loss_mask)).toBe(true);
    expect(Array.isArray(sample.rollout_log_probs)).toBe(true);
    expect(sample.tokens).toEqual([100, 101, 102]);
    expect(sample.loss_mask).toEqual([1, 1]);
    expect(sample.rollout_log_probs).toEqual([-0.1, -0.1]);
  });

  describe('versions', () => {
    it('records full versions, spans and the first and last trainable versions', () => {
      const input = segment(0, [0, 1, 1, 0, 1], { full_versions: ['-1', '4', '4', '-1', '4'] });
      const sample = writeSampleFromSegment(template(), input);
      expect(sample.metadata).toMatchObject({
        full_versions: ['-1', '4', '4', '-1', '4'],
        version_spans: [
          { start: 0, end: 1, version: '-1' },
          { start: 1, end: 3, version: '4' },
          { start: 3, end: 4, version: '-1' },
          { start: 4, end: 5, version: '4' },
        ],
        dressage_start_token_version: '4',
        dressage_end_token_version: '4',
      });
      expect(sample.metadata.dressage_partial_rollout).toBeUndefined();
    });

    it('flags a partial rollout and keeps every token without the masking flag', () => {
      const input = segment(0, [0, 1, 1, 0, 1], { full_versions: ['-1', '3', '3', '-1', '4'] });
      const sample = writeSampleFromSegment(template(), input);
      expect(sample.metadata.dressage_partial_rollout).toBe(true);
      expect(sample.metadata.dressage_start_token_version).toBe('3');
      expect(sample.metadata.dressage_end_token_version).toBe('4');
      expect(sample.loss_mask).toEqual([1, 1, 0, 1]);
    });

    it('masks trainable tokens of older versions when the proxy asked for it', () => {
      const input = segment(0, [0, 1, 1, 1, 0, 1, 1], {
        full_versions: ['-1', '3', 'unknown', '3', '-1', '4', '4'],
        extra_info: { mask_nonlast_version_tokens: true },
      });
      const sample = writeSampleFromSegment(template(), input);
      // Version 3 tokens are masked; the token of unknown version stays.
      expect(sample.loss_mask).toEqual([0, 1, 0, 0, 1, 1]);
      expect(sample.response_length).toBe(6);
      // Versions describe the generation, so they still span both versions.
      expect(sample.metadata.dressage_start_token_version).toBe('3');
      expect(sample.metadata.dressage_partial_rollout).toBe(true);
    });

    it('masks them when the trainer asks for it, whatever the segment says', () => {
      const input = segment(0, [0, 1, 1, 1, 0, 1, 1], {
        full_versions: ['-1', '3', 'unknown', '3', '-1', '4', '4'],
      });
      expect(writeSampleFromSegment(template(), input).loss_mask).toEqual([1, 1, 1, 0, 1, 1]);
      const masked = writeSampleFromSegment(template(), input, { maskNonlastVersionTokens: true });
      expect(masked.loss_mask).toEqual([0, 1, 0, 0, 1, 1]);
    });

    it('does not mask when only one real version is trainable', () => {
      const input = segment(0, [0, 1, 1], {
        full_versions: ['2', '4', 'unknown'],
        extra_info: { mask_nonlast_version_tokens: true },
      });
      expect(writeSampleFromSegment(template(), input).loss_mask).toEqual([1, 1]);
    });

    it('has null start and end versions when no trainable token has a real version', () => {
      const sample = writeSampleFromSegment(template(), segment(0, [0, 1], { full_versions: ['5', '-1'] }));
      expect(sample.metadata.dressage_start_token_version).toBeNull();
      expect(sample.metadata.dressage_end_token_version).toBeNull();
    });

    it('drops stale derived keys carried by the template', () => {
      const stale = template({
        metadata: {
          instance_id: 'instance-1',
          full_versions: ['9'],
          version_spans: [],
          dressage_start_token_version: '9',
          dressage_end_token_version: '9',
          dressage_partial_rollout: true,
          truncated: true,
        },
      });
      const sample = writeSampleFromSegment(stale, segment(0, [0, 1]));
      for (const key of [
        'full_versions',
        'version_spans',
        'dressage_start_token_version',
        'dressage_end_token_version',
        'dressage_partial_rollout',
        'truncated',
      ]) {
        expect(sample.metadata).not.toHaveProperty(key);
      }
    });
  });
});
