import { isAbsolute, resolve } from 'node:path';
import { DressageError } from '@dressage/protocol';

/** The environment a recipe is read against. */
export type Environment = Readonly<Record<string, string | undefined>>;

/** A recipe setting that an environment variable of the reference may also give. */
export interface RecipeEnvironmentVariable {
  /** The recipe key, as a path of field names. */
  path: readonly string[];
  /** The variable's name. */
  variable: string;
  /**
   * What the variable's text must be. `modules`: a comma-separated list of module specifiers; a
   * relative path (`./rewards.ts`) is taken from the working directory, where the variable was set.
   */
  kind: 'integer' | 'boolean' | 'string' | 'modules';
  /** Only where the recipe has the key's section (the variable never creates one, e.g. `blackbox`). */
  sectionRequired?: boolean;
}

/**
 * Every recipe key an environment variable may set. One precedence for all of them: a value the
 * recipe writes, else the variable, else the schema's default (a default never beats the
 * environment).
 */
export const recipeEnvironmentVariables: readonly RecipeEnvironmentVariable[] = [
  { path: ['rollout', 'max_retries'], variable: 'DRESSAGE_ROLLOUT_MAX_RETRIES', kind: 'integer' },
  { path: ['rollout', 'max_active_samples'], variable: 'DRESSAGE_ASYNC_MAX_ACTIVE_SAMPLES', kind: 'integer' },
  {
    path: ['rollout', 'max_outstanding_groups'],
    variable: 'DRESSAGE_ASYNC_MAX_OUTSTANDING_GROUPS',
    kind: 'integer',
  },
  {
    path: ['rollout', 'recall_stale_groups'],
    variable: 'DRESSAGE_STALENESS_RECALL_IN_FLIGHT',
    kind: 'boolean',
  },
  { path: ['blackbox', 'agent'], variable: 'DRESSAGE_BLACKBOX_TYPE', kind: 'string', sectionRequired: true },
  {
    path: ['proxy', 'pause_around_weight_update'],
    variable: 'DRESSAGE_PROXY_PAUSE_AROUND_WEIGHT_UPDATE',
    kind: 'boolean',
  },
  { path: ['proxy', 'pause_required'], variable: 'DRESSAGE_PROXY_PAUSE_REQUIRED', kind: 'boolean' },
  { path: ['proxy', 'pause_timeout_seconds'], variable: 'DRESSAGE_PROXY_PAUSE_TIMEOUT_SEC', kind: 'integer' },
  { path: ['hooks', 'reward_modules'], variable: 'DRESSAGE_REWARD_MODULES', kind: 'modules' },
];

const trueWords = new Set(['1', 'true', 'yes', 'on']);
const falseWords = new Set(['0', 'false', 'no', 'off']);

function parseVariable(entry: RecipeEnvironmentVariable, raw: string): unknown {
  const text = raw.trim();
  const fail = (expected: string) =>
    new DressageError({
      code: 'invalid_argument',
      message: `${entry.variable}=${JSON.stringify(raw)} is not ${expected} (it sets ${entry.path.join('.')} where the recipe leaves it unset)`,
      details: { variable: entry.variable, value: raw, field: entry.path.join('.') },
    });
  if (entry.kind === 'integer') {
    if (!/^[+-]?\d+$/.test(text)) throw fail('an integer');
    return Number.parseInt(text, 10);
  }
  if (entry.kind === 'modules') {
    return text
      .split(',')
      .map((item) => item.trim())
      .filter((item) => item !== '')
      .map((item) => (item.startsWith('.') && !isAbsolute(item) ? resolve(item) : item));
  }
  if (entry.kind === 'boolean') {
    const word = text.toLowerCase();
    if (trueWords.has(word)) return true;
    if (falseWords.has(word)) return false;
    throw fail('a boolean (1/true/yes/on or 0/false/no/off)');
  }
  return text;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The recipe document with every key of {@link recipeEnvironmentVariables} that it leaves unset
 * taken from `env` (set and non-empty variables only). A value the recipe writes, even `null`, is
 * kept. The document is not modified; a variable that does not parse fails naming it.
 */
export function applyRecipeEnvironment(document: unknown, env: Environment): unknown {
  if (!isPlainObject(document)) return document;
  let result: Record<string, unknown> = document;
  for (const entry of recipeEnvironmentVariables) {
    const raw = env[entry.variable];
    if (raw === undefined || raw.trim() === '') continue;
    const [section, key] = entry.path as [string, string];
    const current = result[section];
    if (current !== undefined && !isPlainObject(current)) continue;
    if (current === undefined && entry.sectionRequired === true) continue;
    if (current !== undefined && key in current) continue;
    result = { ...result, [section]: { ...(current ?? {}), [key]: parseVariable(entry, raw) } };
  }
  return result;
}
