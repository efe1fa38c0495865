import { defineConfig } from 'tsup';

export default defineConfig([
  {
    entry: ['src/index.ts', 'src/internal.ts'],
    format: ['esm'],
    dts: true,
    sourcemap: true,
    target: 'node20',
  },
  {
    entry: { 'bin/dressage-engine': 'src/bin/dressage-engine.ts' },
    format: ['esm'],
    dts: false,
    sourcemap: true,
    target: 'node20',
  },
]);
