import { describe, expect, it } from 'vitest';
import { formatBar, formatDuration, Progress, sparkline } from './progress.js';

function recorder(isTTY: boolean) {
  const chunks: string[] = [];
  return { chunks, stream: { isTTY, write: (chunk: string) => chunks.push(chunk) > 0 } };
}

describe('Progress', () => {
  it('rewrites one live line per phase on a terminal, with a bar, rate and time left', () => {
    let now = 0;
    const { chunks, stream } = recorder(true);
    const progress = new Progress({ stream, now: () => now });
    progress.begin('warm_start');
    for (let step = 1; step <= 4; step++) {
      now += 500;
      progress.update({ step, totalSteps: 4, phase: 'warm_start' });
    }
    progress.endPhase('warm-start: 4 supervised steps in 0:02');
    progress.begin('rl');
    now += 2000;
    progress.update({ step: 1, totalSteps: 2, phase: 'rl', reward: 0.25 });
    expect(chunks[0]).toBe('\r\u001b[2Kwarm-start [#####...............] 1/4  2.0 steps/s  0:02 left');
    expect(chunks[3]).toBe('\r\u001b[2Kwarm-start [####################] 4/4  2.0 steps/s  0:00 left');
    // The phase's line is kept, its summary printed under it, and the next phase starts its own clock.
    expect(chunks[4]).toBe('\n');
    expect(chunks[5]).toBe('warm-start: 4 supervised steps in 0:02\n');
    expect(chunks[6]).toBe('\r\u001b[2KRL [##########..........] 1/2  2.0 s/step  0:02 left | reward 0.250');
  });

  it('prints one line every few seconds on a pipe, and always the last step', () => {
    let now = 0;
    const { chunks, stream } = recorder(false);
    const progress = new Progress({ stream, now: () => now, intervalSeconds: 5 });
    progress.begin('rl');
    for (let step = 1; step <= 20; step++) {
      now += 1000;
      progress.update({ step, totalSteps: 20, phase: 'rl', reward: step / 20 });
    }
    const steps = chunks.map((line) => Number(/\] (\d+)\/20/.exec(line)?.[1]));
    expect(steps).toEqual([1, 6, 11, 16, 20]);
    expect(chunks.every((line) => line.endsWith('\n') && !line.includes('\r'))).toBe(true);
  });

  it('prints a step with an alarm at once on a pipe', () => {
    let now = 0;
    const { chunks, stream } = recorder(false);
    const progress = new Progress({ stream, now: () => now });
    progress.update({ step: 1, totalSteps: 10, phase: 'rl' });
    now += 100;
    progress.update({ step: 2, totalSteps: 10, phase: 'rl', alarm: 'grad norm 12x median' });
    expect(chunks).toHaveLength(2);
    expect(chunks[1]).toContain('ALARM grad norm 12x median');
  });
});

describe('formatting', () => {
  it('formats durations, bars and sparklines', () => {
    expect(formatDuration(0)).toBe('0:00');
    expect(formatDuration(125.4)).toBe('2:05');
    expect(formatDuration(3725)).toBe('1:02:05');
    expect(formatBar(0.5, 4)).toBe('[##..]');
    expect(formatBar(2, 4)).toBe('[####]');
    expect(sparkline([0, 0.5, 1])).toBe('▁▅█');
    // Fifty values squeezed to five cells, each the mean of ten.
    const rising = Array.from({ length: 50 }, (_, index) => (index < 10 ? 0 : index < 40 ? 0.5 : 1));
    expect(sparkline(rising, 5)).toBe('▁▅▅▅█');
    expect(sparkline([])).toBe('');
  });
});
