import { appendFile, mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MetricsLog, readMetricsLog } from './metrics-log.js';
import { formatProgressLine } from './progress.js';
import { defaultReportPlots, renderPlotSvg, renderReportHtml } from './report.js';

const records = [0, 1, 2, 3].map((step) => ({
  step,
  time: step * 2.5,
  phase: 'rl' as const,
  metrics: { 'rollout/raw_reward_trajectory_mean': step / 4, 'perf/tokens_per_second': 1000 + step },
}));

describe('metrics log', () => {
  it('appends records and reads them back, tolerating a torn last line', async () => {
    const path = join(await mkdtemp(join(tmpdir(), 'dressage-metrics-')), 'nested', 'metrics.jsonl');
    const log = new MetricsLog(path);
    for (const record of records) await log.append(record);
    await appendFile(path, '{"step": 4, "time": 1');
    expect(await readMetricsLog(path)).toEqual(records);
    expect((await readFile(path, 'utf8')).split('\n')).toHaveLength(5);
  });
});

describe('report', () => {
  it('draws one line per metric with points placed by value', () => {
    const svg = renderPlotSvg({ title: 'Reward', metrics: ['rollout/raw_reward_trajectory_mean'] }, records);
    const path = svg.match(/<path d="([^"]+)"/)?.[1] ?? '';
    const points = path.split(' ').map((point) => point.slice(1).split(',').map(Number));
    expect(points).toHaveLength(4);
    // Rising reward: each point higher on screen (smaller y) than the previous one, x increasing.
    for (let i = 1; i < points.length; i++) {
      expect(points[i]![0]!).toBeGreaterThan(points[i - 1]![0]!);
      expect(points[i]![1]!).toBeLessThan(points[i - 1]![1]!);
    }
    expect(renderPlotSvg({ title: 'Empty', metrics: ['missing'] }, records)).toContain('no data');
  });

  it('marks the steps where the collapse alarm rang', () => {
    const rang = records.map((record) => ({
      ...record,
      metrics: { ...record.metrics, 'alarm/raised': record.step === 2 ? 1 : 0 },
    }));
    const svg = renderPlotSvg({ title: 'Reward', metrics: ['rollout/raw_reward_trajectory_mean'] }, rang);
    expect(svg.match(/<line class="alarm"/g)).toHaveLength(1);
    expect(svg).toContain('<title>collapse alarm at step 2</title>');
    expect(
      renderPlotSvg({ title: 'Reward', metrics: ['rollout/raw_reward_trajectory_mean'] }, records),
    ).not.toContain('class="alarm"');
  });

  it('renders a self-contained page with a summary and escaped names', () => {
    const html = renderReportHtml(
      {
        name: 'run <1>',
        generatedAt: '2026-11-29T00:00:00Z',
        facts: { 'first reward': 0, 'last reward': 0.75 },
      },
      records,
    );
    expect(html).toContain('<title>run &#60;1&#62; — Dressage training report</title>');
    expect(html).toContain('<th>last reward</th><td>0.75</td>');
    expect(html.match(/<svg /g)).toHaveLength(defaultReportPlots.length);
    expect(html).not.toMatch(/<script|https?:\/\//);
  });

  it('formats the progress line', () => {
    expect(
      formatProgressLine({
        step: 12,
        totalSteps: 60,
        phase: 'rl',
        reward: 0.4123,
        tokensPerSecond: 1830.4,
        versionGap: 0,
        gapShares: [1, 0, 0],
        trainerIdleFraction: 0.081,
        logprobDiff: 2.4e-6,
      }),
    ).toBe('step 12/60 rl | reward 0.412 | 1830 tok/s | gap 0.0 | idle 8% | |Δlogp| 2.4e-6');
    // Async: the distribution of version gaps, and the off-policy gap apart from parity.
    expect(
      formatProgressLine({
        step: 12,
        totalSteps: 60,
        phase: 'rl',
        reward: 0.5,
        versionGap: 0.62,
        gapShares: [0.4, 0.58, 0.02],
        trainerIdleFraction: 0.081,
        logprobDiff: 2.1e-7,
        offPolicyLogprobDiff: 0.03,
      }),
    ).toBe(
      'step 12/60 rl | reward 0.500 | gap 0.6 (0:40% 1:58% 2+:2%) | idle 8% | |Δlogp| 2.1e-7 | off-policy 3.0e-2',
    );
    expect(formatProgressLine({ step: 1, totalSteps: 5, phase: 'warm_start' })).toBe('step 1/5 warm-start');
  });
});
