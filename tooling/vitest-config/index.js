// Shared Vitest settings. Tests resolve sibling workspace packages through the `@dressage/source`
// export condition, so they run against TypeScript sources without a prior build.
import { defaultClientConditions, defaultServerConditions } from 'vite';
import { defineConfig, mergeConfig } from 'vitest/config';

const sourceCondition = '@dressage/source';

/** The base every package's `vitest.config.ts` extends. */
export const baseConfig = defineConfig({
  resolve: { conditions: [sourceCondition, ...defaultClientConditions] },
  ssr: { resolve: { conditions: [sourceCondition, ...defaultServerConditions] } },
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    environment: 'node',
    // Real servers, child processes and tfjs on shared two-core machines: bounds that fail a hang, not a slow run.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Two-core CI machines: bound parallel forks so heavy suites do not starve servers under test.
    pool: 'forks',
    maxWorkers: 2,
  },
});

/**
 * Extends the shared base with package-specific settings.
 * @param {import('vitest/config').UserConfig} [overrides]
 */
export function definePackageConfig(overrides = {}) {
  return mergeConfig(baseConfig, overrides);
}
