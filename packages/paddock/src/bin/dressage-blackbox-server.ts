#!/usr/bin/env node
// dressage-blackbox-server: serves the BlackboxServer API with the built-in agent adapters. Settings
// come from the BBS_* environment variables.
import { builtinAdapters } from '../adapters/index.js';
import { blackboxConfigFromEnv } from '../blackbox/config.js';
import { BlackboxServer } from '../blackbox/server.js';

const server = new BlackboxServer({ config: blackboxConfigFromEnv(), adapters: builtinAdapters });
const url = await server.listen();
console.error(`dressage-blackbox-server listening on ${url}`);
const stop = () => {
  server.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
