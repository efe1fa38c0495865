// README examples that tests run. A package README marks its example with an HTML comment on the line
// before the fenced block (`<!-- example: NAME -->`, invisible when rendered); a test reads that block and
// imports it as a module of the package, so the example a user copies is the code CI ran.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

let written = 0;

/**
 * The code of the fenced block marked `<!-- example: NAME -->` in a README.
 * @param {string} readmePath
 * @param {string} [name]
 * @returns {string}
 */
export function readmeExample(readmePath, name = 'example') {
  const text = readFileSync(readmePath, 'utf8');
  const marker = `<!-- example: ${name} -->`;
  const at = text.indexOf(marker);
  if (at < 0) throw new Error(`${readmePath}: no "${marker}" line`);
  if (text.indexOf(marker, at + marker.length) >= 0) throw new Error(`${readmePath}: "${marker}" twice`);
  const block = /^\s*```[a-z]*\n([\s\S]*?)\n```/.exec(text.slice(at + marker.length));
  if (!block) throw new Error(`${readmePath}: no fenced block right after "${marker}"`);
  return block[1];
}

/**
 * Runs a README's marked example as a module of the package in `packageDir` (so that the package's own
 * name and its dependencies resolve as they do for a user) and returns what it exports.
 * @param {string} packageDir
 * @param {{ name?: string, extension?: string }} [options]
 * @returns {Promise<Record<string, unknown>>}
 */
export async function runReadmeExample(packageDir, options = {}) {
  const name = options.name ?? 'example';
  const code = readmeExample(join(packageDir, 'README.md'), name);
  // Under node_modules: ignored by git, biome and tsc, yet inside the package for module resolution.
  const dir = join(packageDir, 'node_modules', '.readme-example');
  mkdirSync(dir, { recursive: true });
  written += 1;
  const file = join(dir, `${name}-${process.pid}-${written}.${options.extension ?? 'ts'}`);
  writeFileSync(file, code);
  try {
    return await import(/* @vite-ignore */ pathToFileURL(file).href);
  } finally {
    rmSync(file, { force: true });
  }
}
