import { fileURLToPath } from 'node:url';
import { runReadmeExample } from '@dressage/vitest-config/readme';
import { afterEach, describe, expect, it, vi } from 'vitest';

const appDirectory = fileURLToPath(new URL('..', import.meta.url));

afterEach(() => {
  vi.restoreAllMocks();
});

describe('README', () => {
  it('runs the example: the torch worker trains on engine rollouts and publishes back', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    await runReadmeExample(appDirectory);
    expect(log.mock.calls).toEqual([
      [4, true],
      ['1', '1'],
    ]);
  }, 120_000);
});
