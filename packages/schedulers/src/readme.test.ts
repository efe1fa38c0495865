import { fileURLToPath } from 'node:url';
import { runReadmeExample } from '@dressage/vitest-config/readme';
import { afterEach, describe, expect, it, vi } from 'vitest';

const packageDirectory = fileURLToPath(new URL('..', import.meta.url));

afterEach(() => {
  vi.restoreAllMocks();
});

describe('README', () => {
  it('runs the example: three batches of two groups of four, half of them right', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    await runReadmeExample(packageDirectory);
    expect(log.mock.calls).toEqual([
      [0, 2, 8, 4],
      [1, 2, 8, 4],
      [2, 2, 8, 4],
    ]);
  });
});
