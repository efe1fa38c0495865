import { describe, expect, it } from 'vitest';
import { createSample } from './sample.js';
import { sampleMetadata } from './sample-metadata.js';

describe('sample metadata reads', () => {
  it('reads the keys the expansion writes', () => {
    const sample = createSample({
      metadata: {
        session_id: 's1',
        instance_id: 'i1',
        parent_traj_id: 't1',
        finish_reason: 'stop',
        segment_index: 2,
        full_versions: ['-1', '3'],
        messages: [{ role: 'user', content: 'hi' }],
        proxy_extra_info: { segment_reason: 'tools_changed' },
      },
    });
    expect(sampleMetadata.sessionId(sample)).toBe('s1');
    expect(sampleMetadata.instanceId(sample)).toBe('i1');
    expect(sampleMetadata.trajectoryId(sample)).toBe('t1');
    expect(sampleMetadata.finishReason(sample)).toBe('stop');
    expect(sampleMetadata.segmentIndex(sample)).toBe(2);
    expect(sampleMetadata.fullVersions(sample)).toEqual(['-1', '3']);
    expect(sampleMetadata.messages(sample)).toHaveLength(1);
    expect(sampleMetadata.segmentReason(sample)).toBe('tools_changed');
  });

  it('answers the empty value for a key left out or of another type', () => {
    const sample = createSample({
      metadata: {
        instance_id: 7,
        segment_index: 'one',
        full_versions: ['1', 2],
        messages: 'x',
        proxy_extra_info: 3,
      },
    });
    expect(sampleMetadata.instanceId(sample)).toBeNull();
    expect(sampleMetadata.sessionId(sample)).toBeNull();
    expect(sampleMetadata.segmentIndex(sample)).toBe(0);
    expect(sampleMetadata.fullVersions(sample)).toBeNull();
    expect(sampleMetadata.messages(sample)).toEqual([]);
    expect(sampleMetadata.segmentReason(sample)).toBeNull();
  });
});
