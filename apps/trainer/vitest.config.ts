import { definePackageConfig } from '@dressage/vitest-config';

export default definePackageConfig({ test: { include: ['src/**/*.test.ts', 'recipes/**/*.test.ts'] } });
