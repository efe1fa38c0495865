import * as tf from '@tensorflow/tfjs';
import { describe, expect, it } from 'vitest';
import { nativeAddonPresent, selectBackend } from './backend.js';

describe('selectBackend', () => {
  it('skips native packages whose addon was never built and settles on wasm, logging the choice', async () => {
    expect(nativeAddonPresent('@tensorflow/tfjs-node')).toBe(false);
    expect(nativeAddonPresent('@tensorflow/tfjs-node-gpu')).toBe(false);
    const lines: string[] = [];
    const selected = await selectBackend({ log: (line) => lines.push(line) });
    expect(selected.candidate).toBe('wasm');
    expect(tf.getBackend()).toBe('wasm');
    expect(selected.skipped).toHaveLength(2);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^tfjs backend: wasm \(wasm\); skipped tensorflow-gpu: @tensorflow\/tfjs-node-gpu has no compiled addon/,
    );
  });

  it('imports only one native package, then falls back', async () => {
    const imported: string[] = [];
    const selected = await selectBackend({
      log: () => {},
      hasNativeAddon: () => true,
      importNative: async (name) => {
        imported.push(name);
        throw new Error('native addon module tfjs_binding.node can not be found');
      },
    });
    expect(imported).toEqual(['@tensorflow/tfjs-node-gpu']);
    expect(selected.skipped[0]).toContain('can not be found');
    expect(selected.skipped[1]).toContain('only one native package is tried');
    expect(selected.candidate).toBe('wasm');
  });

  it('honours an explicit preference, and fails clearly when it cannot start', async () => {
    expect((await selectBackend({ preference: 'cpu', log: () => {} })).backend).toBe('cpu');
    await expect(selectBackend({ preference: 'tensorflow', log: () => {} })).rejects.toMatchObject({
      code: 'unavailable',
    });
  });
});
