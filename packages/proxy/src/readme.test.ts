import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readmeExample, runReadmeExample } from '@dressage/vitest-config/readme';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { usage } from './config.js';

const packageDirectory = fileURLToPath(new URL('..', import.meta.url));

afterEach(() => {
  vi.restoreAllMocks();
});

describe('README', () => {
  it('runs the example: one recorded call, read back with its mask and logprobs', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    await runReadmeExample(packageDirectory);
    expect(log.mock.calls).toHaveLength(2);
    const [choices] = log.mock.calls[0]!;
    expect(choices).toMatchObject([{ index: 0, message: { role: 'assistant', content: 'Hello!' } }]);
    const [segments, mask, logprobs] = log.mock.calls[1]!;
    expect(segments).toBe(1);
    expect(mask).toEqual(new Uint8Array([1, 1, 1]));
    expect(logprobs).toEqual(new Float64Array([-0.25, -0.25, -0.25]));
  });

  it('lists the options exactly as --help prints them', () => {
    expect(readmeExample(join(packageDirectory, 'README.md'), 'options')).toBe(usage.trimEnd());
  });
});
