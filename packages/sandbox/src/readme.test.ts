import { fileURLToPath } from 'node:url';
import { runReadmeExample } from '@dressage/vitest-config/readme';
import { afterEach, describe, expect, it, vi } from 'vitest';

const packageDirectory = fileURLToPath(new URL('..', import.meta.url));

afterEach(() => {
  vi.restoreAllMocks();
});

describe('README', () => {
  it('runs the sandbox example in a real bubblewrap slot', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    await runReadmeExample(packageDirectory);
    expect(log.mock.calls).toEqual([[0, 'hi\n']]);
  });
});
