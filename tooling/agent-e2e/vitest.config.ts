import { definePackageConfig } from '@dressage/vitest-config';

// Every file starts a bubblewrap pool, the proxy and an agent CLI: one file at a time keeps them
// from starving each other on a two-core machine.
export default definePackageConfig({ test: { fileParallelism: false } });
