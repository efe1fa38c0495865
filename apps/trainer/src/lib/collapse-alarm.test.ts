import { describe, expect, it } from 'vitest';
import { CollapseAlarm } from './collapse-alarm.js';

const mixed = [
  [1, 0, 1, 1],
  [0, 0, 1, 0],
];

describe('CollapseAlarm', () => {
  it('rings on a gradient norm far above its running median, not before it has a median', () => {
    const alarm = new CollapseAlarm({ warmupSteps: 3 });
    expect(alarm.observe(10, mixed, 0.5).reason).toBeUndefined();
    for (const norm of [0.05, 0.04, 0.06]) expect(alarm.observe(norm, mixed, 0.5).reason).toBeUndefined();
    const quiet = alarm.observe(0.1, mixed, 0.5);
    expect(quiet.reason).toBeUndefined();
    expect(quiet.metrics['alarm/grad_norm_ratio']).toBeCloseTo(0.1 / 0.055);
    const loud = alarm.observe(0.7, mixed, 0.5);
    expect(loud.reason).toMatch(/^grad norm \d+\.\dx its median$/);
    expect(loud.metrics['alarm/raised']).toBe(1);
  });

  it('rings when every group scored the same below the best reward, not at a perfect score', () => {
    const alarm = new CollapseAlarm();
    expect(
      alarm.observe(
        undefined,
        [
          [1, 1],
          [1, 1],
        ],
        1,
      ).reason,
    ).toBeUndefined();
    expect(
      alarm.observe(
        undefined,
        [
          [1, 1],
          [1, 1],
        ],
        1,
      ).metrics,
    ).toEqual({
      'alarm/uniform_groups': 1,
      'alarm/raised': 0,
    });
    const collapsed = alarm.observe(
      undefined,
      [
        [0, 0],
        [0, 0],
      ],
      0,
    );
    expect(collapsed.reason).toBe('every group scored the same: nothing to learn from');
    expect(
      alarm.observe(
        undefined,
        [
          [0, 1],
          [0, 0],
        ],
        0.25,
      ).metrics['alarm/uniform_groups'],
    ).toBe(0.5);
  });
});
