import { fileURLToPath } from 'node:url';
import { runReadmeExample } from '@dressage/vitest-config/readme';
import { afterEach, describe, expect, it, vi } from 'vitest';

const packageDirectory = fileURLToPath(new URL('..', import.meta.url));

afterEach(() => {
  vi.restoreAllMocks();
});

describe('README', () => {
  it('runs the example: one trained sample listed and its tokens decoded', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    await runReadmeExample(packageDirectory);
    expect(log.mock.calls).toEqual([
      [1, 's1', 1],
      [
        [
          ['Hello', 1],
          ['!', 1],
          ['<|im_end|>', 1],
        ],
      ],
    ]);
  });
});
