#!/usr/bin/env node
import { DressageError } from '@dressage/protocol';
import { runEngineCli } from '../engine-cli.js';

const io = { log: (line: string) => console.log(line), error: (line: string) => console.error(line) };

// `--exit-with-stdin`: a parent that starts the engine keeps its stdin open; when the parent dies,
// even by SIGKILL, stdin ends and the engine exits instead of living on as an orphan.
const argv = process.argv.slice(2);
const exitWithStdin = argv.includes('--exit-with-stdin');
if (exitWithStdin) {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('error', () => process.exit(0));
  process.stdin.resume();
}

try {
  const server = await runEngineCli(
    argv.filter((argument) => argument !== '--exit-with-stdin'),
    io,
  );
  if (server !== null) {
    const stop = () => {
      void server.close().then(() => process.exit(0));
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  }
} catch (error) {
  console.error(error instanceof Error ? error.message : String(error));
  // Exit now: a watched stdin would keep the process alive. A usage error (an unknown command or
  // flag, a bad value) exits 2, as every dressage binary does.
  process.exit(DressageError.isInstance(error) && error.code === 'invalid_argument' ? 2 : 1);
}
