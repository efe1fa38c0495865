import { defineConfig } from 'tsup';

export default defineConfig([
  { entry: ['src/index.ts'], format: ['esm'], dts: true, sourcemap: true, target: 'node20' },
  {
    entry: { 'bin/dressage': 'src/bin/dressage.ts' },
    format: ['esm'],
    dts: false,
    sourcemap: true,
    target: 'node20',
  },
]);
