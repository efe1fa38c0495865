import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const packageRoot = join(dirname(fileURLToPath(import.meta.url)), '..');

// Imports `entry` in a fresh Node process and reports whether TensorFlow.js was loaded: tfjs-core
// creates its engine as `globalThis._tfengine` when its module is evaluated.
async function loadsTensorFlow(entry: string): Promise<{ tfjs: boolean; exports: string[] }> {
  const script = `const module = await import(${JSON.stringify(entry)});
process.stdout.write(JSON.stringify({ tfjs: globalThis._tfengine !== undefined, exports: Object.keys(module) }));`;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', '--conditions=@dressage/source', '--input-type=module', '--eval', script],
    { cwd: packageRoot, timeout: 60_000 },
  );
  return JSON.parse(stdout) as { tfjs: boolean; exports: string[] };
}

describe('entry points', () => {
  it('the main entry converts and talks gRPC without loading TensorFlow.js', async () => {
    const main = await loadsTensorFlow('./src/index.ts');
    expect(main.tfjs).toBe(false);
    expect(main.exports).toEqual(
      expect.arrayContaining([
        'convertSamplesToPackedTrainBatch',
        'createTrainerClient',
        'policyLossReference',
      ]),
    );
    expect(main.exports).not.toContain('policyLoss');
  }, 60_000);

  it('the tfjs entry carries the policy loss and backend selection', async () => {
    const tfjs = await loadsTensorFlow('./src/tfjs.ts');
    expect(tfjs.tfjs).toBe(true);
    expect(tfjs.exports).toEqual(
      expect.arrayContaining([
        'policyLoss',
        'policyLossGradients',
        'clipGradientsByGlobalNorm',
        'selectBackend',
      ]),
    );
  }, 60_000);
});
