import { describe, expect, it } from 'vitest';
import type { SessionSummary } from './model.js';
import { parseSessionQuery, SessionIndex } from './session-index.js';

function summary(index: number, overrides: Partial<SessionSummary> = {}): SessionSummary {
  return {
    id: `session-${index}`,
    sessionId: `session-${index}`,
    instanceId: `instance-${index % 3}`,
    reward: index / 10,
    status: 'completed',
    step: null,
    segmentCount: 1 + (index % 4),
    tokenCount: 100,
    trainableCount: 20,
    versions: index % 5 === 0 ? ['1', '2'] : ['1'],
    aborted: false,
    truncated: false,
    multiVersion: index % 5 === 0,
    reasons: ['initial'],
    ...overrides,
  };
}

const summaries = Array.from({ length: 30 }, (_, index) =>
  summary(
    index,
    index === 7
      ? { status: 'aborted', aborted: true }
      : index === 8
        ? { truncated: true, status: 'truncated' }
        : {},
  ),
);
const index = new SessionIndex(summaries);

describe('SessionIndex', () => {
  it('pages in load order and reports the total', () => {
    const page = index.query({ offset: 10, limit: 5 });
    expect(page.total).toBe(30);
    expect(page.items.map((item) => item.id)).toEqual([
      'session-10',
      'session-11',
      'session-12',
      'session-13',
      'session-14',
    ]);
    expect(index.query({ offset: 28, limit: 5 }).items).toHaveLength(2);
  });

  it('filters by reward range, status flags, multi-version and segment count', () => {
    expect(index.query({ rewardMin: 1, rewardMax: 1.5 }).items.map((item) => item.reward)).toEqual([
      1, 1.1, 1.2, 1.3, 1.4, 1.5,
    ]);
    expect(index.query({ aborted: true }).items.map((item) => item.id)).toEqual(['session-7']);
    expect(index.query({ truncated: true }).items.map((item) => item.id)).toEqual(['session-8']);
    expect(index.query({ aborted: false }).total).toBe(29);
    expect(index.query({ multiVersion: true }).items.map((item) => item.id)).toEqual([
      'session-0',
      'session-5',
      'session-10',
      'session-15',
      'session-20',
      'session-25',
    ]);
    expect(index.query({ segmentsMin: 4 }).items.every((item) => item.segmentCount === 4)).toBe(true);
    expect(index.query({ segmentsMin: 2, segmentsMax: 3 }).total).toBe(15);
  });

  it('searches session and instance ids case-insensitively, and sorts by reward', () => {
    expect(index.query({ search: 'SESSION-2' }).items.map((item) => item.id)).toEqual([
      'session-2',
      'session-20',
      'session-21',
      'session-22',
      'session-23',
      'session-24',
      'session-25',
      'session-26',
      'session-27',
      'session-28',
      'session-29',
    ]);
    expect(index.query({ search: 'instance-1' }).total).toBe(10);
    expect(index.query({ sort: '-reward', limit: 2 }).items.map((item) => item.id)).toEqual([
      'session-29',
      'session-28',
    ]);
  });

  it('sorts sessions without a reward last and never matches them against a reward range', () => {
    const mixed = new SessionIndex([summary(1, { reward: null }), summary(2), summary(3)]);
    expect(mixed.query({ sort: 'reward' }).items.map((item) => item.id)).toEqual([
      'session-2',
      'session-3',
      'session-1',
    ]);
    expect(mixed.query({ rewardMin: -100 }).total).toBe(2);
  });

  it('reads queries from URL parameters and caps the page size', () => {
    const query = parseSessionQuery(
      new URLSearchParams(
        'search=abc&rewardMin=0.5&aborted=1&multiVersion=0&segmentsMax=3&limit=50000&sort=-reward&bogus=1',
      ),
    );
    expect(query).toEqual({
      search: 'abc',
      rewardMin: 0.5,
      segmentsMax: 3,
      limit: 50000,
      aborted: true,
      multiVersion: false,
      sort: '-reward',
    });
    expect(index.query({ limit: 50000 }).limit).toBe(1000);
  });
});
