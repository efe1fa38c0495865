import { definePackageConfig } from '@dressage/vitest-config';

// Every file starts real servers and child processes: one file at a time keeps them from starving
// each other on a two-core machine.
export default definePackageConfig({ test: { fileParallelism: false } });
