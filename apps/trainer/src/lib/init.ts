import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DressageError } from '@dressage/protocol';

/** The agents `dressage init` scaffolds: a whitebox agent of your own, or an agent CLI in a sandbox. */
export const initAgents = ['whitebox', 'opencode'] as const;

/** One of {@link initAgents}. */
export type InitAgent = (typeof initAgents)[number];

/** Options of {@link initProject}. */
export interface InitOptions {
  /** The directory to write; created when missing. */
  directory: string;
  /** `whitebox` (default): the order-status task; `opencode`: the blackbox recipe for that agent CLI. */
  agent?: InitAgent;
  /** Write into a directory that is not empty, replacing the scaffold's files there. */
  force?: boolean;
}

/** What {@link initProject} wrote. */
export interface InitResult {
  /** The directory, absolute. */
  directory: string;
  /** The files written, relative to the directory, in the order written. */
  files: string[];
}

// The shipped recipe each scaffold copies, and its files: the orders recipe as it ships (the one the
// tutorial's test trains), or the blackbox recipe (opencode in bubblewrap sandboxes).
const whiteboxFiles = ['README.md', 'recipe.yaml', 'task.ts', 'prompts.jsonl'] as const;
const blackboxFiles = ['README.md', 'recipe.yaml', 'task.ts', 'prompts.jsonl', 'system-prompt.txt'] as const;

/**
 * The app's `recipes` directory. Found by walking up from this module, so that it is the same from
 * the sources (tests) and from the bundle (`dist/bin/dressage.js` or a chunk beside it).
 */
export function recipesDirectory(): string {
  let directory = dirname(fileURLToPath(import.meta.url));
  for (let level = 0; level < 5; level += 1) {
    const candidate = join(directory, 'recipes');
    if (existsSync(join(candidate, 'orders', 'recipe.yaml'))) return candidate;
    directory = dirname(directory);
  }
  throw new DressageError({
    code: 'not_found',
    message: `the shipped recipes are not beside ${fileURLToPath(import.meta.url)}`,
  });
}

/**
 * The scaffold's `package.json`: it makes the directory an ES module package, so that its `.ts`
 * modules load as the modules they are wherever the directory is (outside one, Node.js would take
 * `task.ts` for CommonJS and refuse to load it).
 */
export const scaffoldPackageJson = `${JSON.stringify({ private: true, type: 'module' }, null, 2)}\n`;

/** The files of a scaffold, by name: the text `dressage init` writes. */
export async function scaffoldFiles(agent: InitAgent = 'whitebox'): Promise<Map<string, string>> {
  const recipes = recipesDirectory();
  const files = new Map<string, string>([['package.json', scaffoldPackageJson]]);
  if (agent === 'whitebox') {
    for (const name of whiteboxFiles) files.set(name, await readFile(join(recipes, 'orders', name), 'utf8'));
    return files;
  }
  for (const name of blackboxFiles) files.set(name, await readFile(join(recipes, 'blackbox', name), 'utf8'));
  return files;
}

/**
 * Writes a recipe directory that `dressage train --recipe DIR/recipe.yaml` runs as is: a recipe, a
 * task module (an agent with one tool and a reward, or the reward of an agent CLI's task), a prompts
 * file and a README. Refuses a directory that has anything in it unless `force` is set.
 */
export async function initProject(options: InitOptions): Promise<InitResult> {
  const agent = options.agent ?? 'whitebox';
  if (!(initAgents as readonly string[]).includes(agent)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `--agent: ${JSON.stringify(agent)} is not one of ${initAgents.join(', ')}`,
      details: { field: 'agent' },
    });
  }
  const directory = resolve(options.directory);
  const existing = existsSync(directory) ? await readdir(directory) : [];
  if (existing.length > 0 && options.force !== true) {
    throw new DressageError({
      code: 'already_exists',
      message: `${options.directory} is not empty (${existing.length} entries); use --force to write the scaffold into it`,
      details: { directory },
    });
  }
  const files = await scaffoldFiles(agent);
  await mkdir(directory, { recursive: true });
  for (const [name, text] of files) await writeFile(join(directory, name), text);
  return { directory, files: [...files.keys()] };
}
