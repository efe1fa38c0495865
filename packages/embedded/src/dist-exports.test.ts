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
  it('generates through the engine from dist, on wasm loaded offline', async () => {
    const source = `
      import { CausalLanguageModel, InferenceEngine, TokenVocabulary, defaultSampling, initializeBackend } from '@dressage/embedded';
      const backend = await initializeBackend();
      const model = CausalLanguageModel.create(new TokenVocabulary([1, 2, 3, 4, 5]), { modelDimension: 16, headCount: 2,
        layerCount: 1, feedForwardDimension: 32, contextLength: 32 });
      const engine = new InferenceEngine({ model });
      const result = await engine.generate({ rid: 'r', inputIds: [1, 2], logprobStartLength: -1,
        sampling: { ...defaultSampling, maxNewTokens: 3, seed: 1 } });
      console.log(JSON.stringify({ resolved: import.meta.resolve('@dressage/embedded'), backend, output: result.outputIds.length }));
    `;
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', source], {
      cwd: packageDirectory,
    });
    const result = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(result).toMatchObject({ backend: 'wasm', output: 3 });
    expect(result.resolved).toMatch(/\/dist\/index\.js$/);
  });

  it('ships a runnable dressage-engine bin', async () => {
    const { stdout } = await run(process.execPath, [
      join(packageDirectory, 'dist', 'bin', 'dressage-engine.js'),
      '--help',
    ]);
    expect(stdout).toContain('dressage-engine serve --model DIR');
  });
});
