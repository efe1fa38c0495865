import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DressageError } from '@dressage/protocol';

/** `module#export` → its parts; a bare module means its default export. */
export function parseHookReference(reference: string): { module: string; exportName: string } {
  const hash = reference.lastIndexOf('#');
  if (hash < 0) return { module: reference, exportName: 'default' };
  return { module: reference.slice(0, hash), exportName: reference.slice(hash + 1) };
}

/**
 * Imports a module named in a recipe: a path relative to the recipe (`./task.ts`), an absolute path,
 * or a package specifier. TypeScript recipe files need a TypeScript-aware loader in the process; the
 * `dressage` CLI registers one at start.
 */
export async function importRecipeModule(
  specifier: string,
  baseDirectory: string,
): Promise<Record<string, unknown>> {
  const isPath = specifier.startsWith('.') || isAbsolute(specifier);
  const target = isPath ? pathToFileURL(resolve(baseDirectory, specifier)).href : specifier;
  try {
    return (await import(target)) as Record<string, unknown>;
  } catch (error) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Cannot load recipe module ${specifier} (from ${baseDirectory}): ${(error as Error).message}`,
      cause: error,
      details: { module: specifier },
    });
  }
}

/** Loads the value a hook reference names, checking that it exists. */
export async function loadHook<T = unknown>(reference: string, baseDirectory: string): Promise<T> {
  const { module, exportName } = parseHookReference(reference);
  const loaded = await importRecipeModule(module, baseDirectory);
  if (!(exportName in loaded) || loaded[exportName] === undefined) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Recipe module ${module} has no export "${exportName}" (exports: ${Object.keys(loaded).join(', ') || 'none'})`,
      details: { module, export: exportName },
    });
  }
  return loaded[exportName] as T;
}
