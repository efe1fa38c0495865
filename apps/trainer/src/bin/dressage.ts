#!/usr/bin/env node
// The dressage CLI: `train` runs a recipe end to end; `report` redraws a run's HTML report; `proxy`,
// `engine` and `blackbox-server` start the services of a cluster deployment.
import { parseArgs } from 'node:util';
import { startInspector } from '@dressage/inspector';
import { DressageError } from '@dressage/protocol';
import { register } from 'tsx/esm/api';
import { delegate } from '../lib/bin-delegate.js';
import { dryRun, formatChecks } from '../lib/dry-run.js';
import { runInitCommand } from '../lib/init-command.js';
import { loadRecipe } from '../lib/recipe.js';
import { writeReport } from '../lib/run-report.js';
import { currentInvocation, formatRunSummary } from '../lib/run-summary.js';
import { runTraining } from '../lib/training-run.js';

const usage = `dressage — agentic RL training

  dressage init DIR [--agent whitebox|opencode] [--force]
  dressage train --recipe FILE.yaml [--resume] [--steps N] [--dry-run] [--fresh-warm-start]
  dressage warm-start --recipe FILE.yaml
  dressage report --run DIR [--name NAME]
  dressage inspect --run DIR | --file FILE | --store DIR [--port N] [--host 127.0.0.1] [--allow-host NAME]
  dressage proxy [dressage-proxy flags]
  dressage engine [dressage-engine arguments]
  dressage blackbox-server
`;

// Recipes name TypeScript modules (agents, rewards); load them without a build step.
register();

async function train(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      recipe: { type: 'string' },
      resume: { type: 'boolean' },
      steps: { type: 'string' },
      'dry-run': { type: 'boolean' },
      'fresh-warm-start': { type: 'boolean' },
    },
  });
  if (values.recipe === undefined)
    throw new DressageError({ code: 'invalid_argument', message: '--recipe is required' });
  const loaded = await loadRecipe(values.recipe);
  if (values['dry-run']) {
    const checks = await dryRun(loaded);
    console.log(formatChecks(checks));
    const failed = checks.filter((item) => !item.ok).length;
    console.log(
      failed === 0 ? 'dry run: every check passed' : `dry run: ${failed} of ${checks.length} checks failed`,
    );
    return failed === 0 ? 0 : 1;
  }
  const controller = new AbortController();
  const interrupt = () => {
    if (controller.signal.aborted) process.exit(130);
    process.stderr.write('\nstopping after this step (Ctrl-C again to quit at once)\n');
    controller.abort();
  };
  process.on('SIGINT', interrupt);
  process.on('SIGTERM', interrupt);
  const steps = values.steps === undefined ? undefined : Number(values.steps);
  const summary = await runTraining(loaded, {
    resume: values.resume ?? false,
    freshWarmStart: values['fresh-warm-start'] ?? false,
    signal: controller.signal,
    ...(steps === undefined ? {} : { steps }),
  });
  console.log(formatRunSummary(loaded.recipe.name, summary, currentInvocation()));
  return 0;
}

// Runs only the recipe's warm-start and writes its result to `warm_start.cache_dir`, replacing
// what was there: how a shipped warm-start is regenerated.
async function warmStartOnly(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { recipe: { type: 'string' } } });
  if (values.recipe === undefined)
    throw new DressageError({ code: 'invalid_argument', message: '--recipe is required' });
  const loaded = await loadRecipe(values.recipe);
  if ((loaded.recipe.warm_start.cache_dir ?? null) === null || loaded.recipe.warm_start.steps === 0)
    throw new DressageError({
      code: 'invalid_argument',
      message: `${values.recipe}: set warm_start.steps and warm_start.cache_dir to write a warm-start`,
    });
  const summary = await runTraining(loaded, { warmStartOnly: true, freshWarmStart: true });
  console.log(`warm-start written to ${summary.warmStart.path}`);
  return 0;
}

async function report(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { run: { type: 'string' }, name: { type: 'string' } } });
  if (values.run === undefined)
    throw new DressageError({ code: 'invalid_argument', message: '--run is required' });
  console.log(await writeReport(values.run, { name: values.name ?? values.run }));
  return 0;
}

// Serves the inspector page until interrupted.
async function inspect(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      run: { type: 'string' },
      file: { type: 'string', multiple: true },
      store: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string' },
      'allow-host': { type: 'string', multiple: true },
    },
  });
  const inspector = await startInspector({
    ...(values.run === undefined ? {} : { run: values.run }),
    ...(values.file === undefined ? {} : { file: values.file }),
    ...(values.store === undefined ? {} : { store: values.store }),
    ...(values.port === undefined ? {} : { port: Number(values.port) }),
    ...(values.host === undefined ? {} : { host: values.host }),
    ...(values['allow-host'] === undefined ? {} : { allowedHosts: values['allow-host'] }),
  });
  console.log(`dressage inspect: ${inspector.index.size} sessions at ${inspector.url} (Ctrl-C to stop)`);
  await new Promise((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await inspector.close();
  return 0;
}

// Runs another package's CLI as a child process, forwarding signals and the exit code.
async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  // `dressage train --help` and the like: the usage, not an unknown-option error. `proxy`, `engine`
  // and `blackbox-server` pass it on to the command they start.
  if (
    ['train', 'warm-start', 'report', 'inspect'].includes(command ?? '') &&
    (rest.includes('--help') || rest.includes('-h'))
  ) {
    process.stdout.write(usage);
    return 0;
  }
  switch (command) {
    case 'init':
      return runInitCommand(rest);
    case 'train':
      return train(rest);
    case 'warm-start':
      return warmStartOnly(rest);
    case 'report':
      return report(rest);
    case 'inspect':
      return inspect(rest);
    case 'proxy':
      return delegate('@dressage/proxy', 'dressage-proxy', rest);
    case 'engine':
      return delegate('@dressage/embedded', 'dressage-engine', rest);
    case 'blackbox-server':
      return delegate('@dressage/paddock', 'dressage-blackbox-server', rest);
    default: {
      const help = command === undefined || command === '--help' || command === '-h' || command === 'help';
      if (!help)
        process.stderr.write(
          `dressage: unknown ${command.startsWith('-') ? 'option' : 'command'} '${command}'\n`,
        );
      process.stdout.write(usage);
      return help ? 0 : 2;
    }
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    const message = DressageError.isInstance(error) ? `${error.code}: ${error.message}` : String(error);
    process.stderr.write(`dressage: ${message}\n`);
    // An unknown flag or a flag without its value is a usage error: exit 2, as every binary does.
    const code = (error as { code?: unknown }).code;
    process.exit(typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS') ? 2 : 1);
  },
);
