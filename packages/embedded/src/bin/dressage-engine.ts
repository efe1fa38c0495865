#!/usr/bin/env node
import { runEngineCli } from '../engine-cli.js';

const io = { log: (line: string) => console.log(line), error: (line: string) => console.error(line) };

try {
  const server = await runEngineCli(process.argv.slice(2), io);
  if (server !== null) {
    const stop = () => {
      void server.close().then(() => process.exit(0));
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  }
} catch (error) {
  console.error(error instanceof Error ? error.message : String(error));
  process.exitCode = 1;
}
