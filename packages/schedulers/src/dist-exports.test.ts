import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const packageDirectory = dirname(dirname(fileURLToPath(import.meta.url)));
const run = promisify(execFile);
const built = existsSync(join(packageDirectory, 'dist', 'index.js'));

// The built package as a consumer sees it: a plain Node process resolving the package's own name
// through package.json "exports" to dist. Skipped when run before a build (turbo builds first).
describe.skipIf(!built)('built package exports', () => {
  it('runs a sync rollout from dist', async () => {
    const source = `
      import { createRolloutScheduler, PromptDataSource } from '@dressage/schedulers';
      const dataSource = PromptDataSource.fromRecords([{ prompt: 'a' }, { prompt: 'b' }]);
      const generate = (sample) => ({ ...sample, response_length: 1, tokens: [1, 2], loss_mask: [1], status: 'completed' });
      const scheduler = createRolloutScheduler('sync', { dataSource, generate }, { rolloutBatchSize: 2 }, {});
      const { samples } = await scheduler.generateRollout(0);
      await scheduler.shutdown();
      console.log(JSON.stringify({ resolved: import.meta.resolve('@dressage/schedulers'), groups: samples.length }));
    `;
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', source], {
      cwd: packageDirectory,
    });
    const result = JSON.parse(stdout.trim());
    expect(result.resolved).toMatch(/\/dist\/index\.js$/);
    expect(result.groups).toBe(2);
  });
});
