import { fileURLToPath } from 'node:url';
import { runReadmeExample } from '@dressage/vitest-config/readme';
import { afterEach, describe, expect, it, vi } from 'vitest';

const packageDirectory = fileURLToPath(new URL('..', import.meta.url));

afterEach(() => {
  vi.restoreAllMocks();
});

describe('README', () => {
  it('runs the example: a refused request, then a batch streamed to a trainer over gRPC', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    await runReadmeExample(packageDirectory);
    expect(log.mock.calls[0]).toEqual(['invalid_argument']);
    expect(log.mock.calls[1]).toEqual([
      1,
      expect.objectContaining({ batch_id: 'step-1', rollout_id: 1, samples_trained: 1, tokens_trained: 5 }),
    ]);
    expect(log.mock.calls).toHaveLength(2);
  });
});
