import { describe, expect, it } from 'vitest';
import { formatRunSummary } from './run-summary.js';
import type { TrainingSummary } from './training-run.js';

const summary: TrainingSummary = {
  outputDirectory: '/repo/runs/weather',
  stepsCompleted: 20,
  firstReward: 0.1,
  lastReward: 1,
  maxLogprobDiff: 4.8e-6,
  maxOffPolicyLogprobDiff: 0,
  meanVersionGap: 0,
  weightVersion: '21',
  stopped: false,
  reportPath: '/repo/runs/weather/report.html',
  rewards: [...Array.from({ length: 10 }, () => 0.1), ...Array.from({ length: 10 }, () => 0.95)],
  warmStart: { source: 'cached', path: null, seconds: 0.2 },
  rlSeconds: 50,
};

describe('formatRunSummary', () => {
  it('ends with the reward curve, the report and the command that opens the run', () => {
    const text = formatRunSummary('weather', summary, { command: 'pnpm dressage', cwd: '/repo' });
    expect(text.split('\n')).toEqual([
      'weather: 20 RL steps',
      'reward: ▂▂▂▂▂▂▂▂▂▂██████████  first 0.100, last ten 0.950',
      'max |trainer - rollout logprob| over on-policy tokens: 4.80e-6',
      'weights: version 21',
      'metrics: runs/weather/metrics.jsonl',
      'report:  runs/weather/report.html (open it in a browser)',
      'inspect every trajectory: pnpm dressage inspect --run runs/weather',
    ]);
  });

  it('keeps absolute paths outside the working directory and says how to continue a stopped run', () => {
    const text = formatRunSummary(
      'weather',
      { ...summary, stopped: true },
      { command: 'dressage', cwd: '/elsewhere' },
    );
    expect(text).toContain('inspect every trajectory: dressage inspect --run /repo/runs/weather');
    expect(text).toContain('continue: dressage train --recipe <recipe> --resume');
  });
});
