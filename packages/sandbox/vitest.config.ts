import { definePackageConfig } from '@dressage/vitest-config';

export default definePackageConfig();
