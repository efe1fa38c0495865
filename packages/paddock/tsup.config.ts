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
    entry: {
      'bin/dressage-blackbox-server': 'src/bin/dressage-blackbox-server.ts',
      'bin/dressage-local-bwrap': 'src/bin/dressage-local-bwrap.ts',
    },
    format: ['esm'],
    dts: false,
    sourcemap: true,
    target: 'node20',
  },
]);
