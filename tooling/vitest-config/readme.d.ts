/** The code of the fenced block marked `<!-- example: NAME -->` (default `example`) in a README. */
export declare function readmeExample(readmePath: string, name?: string): string;

/**
 * Runs a README's marked example as a module of the package in `packageDir` (its own name and its
 * dependencies resolve as they do for a user) and returns what it exports.
 */
export declare function runReadmeExample(
  packageDir: string,
  options?: { name?: string; extension?: string },
): Promise<Record<string, unknown>>;
