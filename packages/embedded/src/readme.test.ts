import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readmeExample, runReadmeExample } from '@dressage/vitest-config/readme';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { runEngineCli } from './engine-cli.js';

const packageDirectory = fileURLToPath(new URL('..', import.meta.url));

afterEach(() => {
  vi.restoreAllMocks();
});

describe('README', () => {
  it('runs the example: a model made on the spot, served, and eight tokens generated', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    await runReadmeExample(packageDirectory);
    expect(log.mock.calls).toEqual([[8, { type: 'length', length: 8 }, 8]]);
  });

  it('lists the options exactly as dressage-engine --help prints them', async () => {
    const lines: string[] = [];
    await runEngineCli(['--help'], { log: (line) => lines.push(line), error: (line) => lines.push(line) });
    expect(readmeExample(join(packageDirectory, 'README.md'), 'options')).toBe(lines.join('\n').trimEnd());
  });
});
