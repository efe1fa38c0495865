import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The front end is bundled once at build time into dist/web and served by the package's own server.
// Fixed asset names let the standalone HTML export inline them.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: './',
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: fileURLToPath(new URL('../dist/web', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    rolldownOptions: {
      output: {
        entryFileNames: 'assets/inspector.js',
        chunkFileNames: 'assets/[name].js',
        assetFileNames: 'assets/inspector[extname]',
      },
    },
  },
});
