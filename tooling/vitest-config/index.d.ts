import type { UserConfig } from 'vitest/config';

/** The base every package's `vitest.config.ts` extends. */
export declare const baseConfig: UserConfig;

/** Extends the shared base with package-specific settings. */
export declare function definePackageConfig(overrides?: UserConfig): UserConfig;
