import { relative } from 'node:path';
import { parseArgs } from 'node:util';
import { DressageError } from '@dressage/protocol';
import { type InitAgent, initAgents, initProject } from './init.js';

/** `dressage init --help`. */
export const initUsage = `dressage init DIR [--agent whitebox|opencode] [--force]

  Writes a recipe directory that trains as is:
    dressage train --recipe DIR/recipe.yaml

  --agent whitebox   (default) an order-status agent of your own (task.ts: one tool, a reward and the
                     supervised warm-start) on a tiny model trained from scratch on this machine's CPU:
                     the reward rises within minutes
  --agent opencode   the opencode agent CLI, unmodified, in bubblewrap sandboxes through the
                     recording proxy: the plumbing end to end (the tiny model does not learn its
                     shell tasks)
  --force            write into DIR even when it is not empty (replacing the scaffold's files)

  Files: package.json, README.md, recipe.yaml, task.ts, prompts.jsonl (and system-prompt.txt for an
  agent CLI).
`;

/** Where the command writes (the CLI's stdout and stderr; tests pass their own). */
export interface InitCommandOutput {
  out(text: string): void;
  error(text: string): void;
}

const processOutput: InitCommandOutput = {
  out: (text) => process.stdout.write(text),
  error: (text) => process.stderr.write(text),
};

/**
 * `dressage init DIR`: parses the arguments, writes the scaffold and says what to run next. Returns
 * the exit status: 0 done, 2 a usage error or a directory that is not empty (without `--force`).
 */
export async function runInitCommand(
  args: readonly string[],
  output: InitCommandOutput = processOutput,
): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(args);
  } catch (error) {
    output.error(`dressage init: ${(error as Error).message}\n\n${initUsage}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help === true) {
    output.out(initUsage);
    return 0;
  }
  if (positionals.length !== 1) {
    output.error(`dressage init: name one directory\n\n${initUsage}`);
    return 2;
  }
  const agent = (values.agent ?? 'whitebox') as InitAgent;
  if (!(initAgents as readonly string[]).includes(agent)) {
    output.error(
      `dressage init: --agent must be one of ${initAgents.join(', ')}, not ${JSON.stringify(agent)}\n`,
    );
    return 2;
  }
  const directory = positionals[0]!;
  try {
    const result = await initProject({ directory, agent, force: values.force === true });
    const shown = relative(process.cwd(), result.directory) || '.';
    output.out(
      `wrote ${result.files.map((file) => `${shown}/${file}`).join(', ')}\n` +
        `next: dressage train --recipe ${shown}/recipe.yaml   (then read ${shown}/README.md)\n`,
    );
    return 0;
  } catch (error) {
    if (DressageError.isInstance(error) && error.code === 'already_exists') {
      output.error(`dressage init: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
}

function parse(args: readonly string[]) {
  return parseArgs({
    args: [...args],
    allowPositionals: true,
    options: {
      agent: { type: 'string' },
      force: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}
