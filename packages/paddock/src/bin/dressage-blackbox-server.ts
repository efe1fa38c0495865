#!/usr/bin/env node
// dressage-blackbox-server: serves the BlackboxServer API with the built-in agent adapters. Settings
// come from the BBS_* environment variables; the bearer key from BBS_API_KEY_FILE or BBS_API_KEY.
import { parseArgs } from 'node:util';
import { isLoopbackAddress } from '@dressage/protocol/internal';
import { builtinAdapters } from '../adapters/index.js';
import { blackboxApiKeyFromEnv, blackboxConfigFromEnv } from '../blackbox/config.js';
import { BlackboxServer } from '../blackbox/server.js';

const usage = `Usage: dressage-blackbox-server [--help]

Serves the BlackboxServer API with the built-in agent adapters. Every setting is an environment
variable:

  BBS_HOST                          listen address (default 127.0.0.1)
  BBS_PORT                          listen port (default 23456)
  BBS_API_KEY_FILE                  file holding the bearer key every route but /health requires
  BBS_API_KEY                       the key itself (prefer the file: children never see either)
  BBS_RUNTIME_ROOT                  where sessions keep their files (default /tmp/blackbox_server)
  BBS_MAX_SESSIONS                  concurrent sessions (default 1)
  BBS_MAX_TURNS                     turns a session may take (default 200)
  BBS_BACKEND_TIMEOUT               seconds an agent turn may take (default 960)
  BBS_EXECUTE_CMD_TIMEOUT           seconds an execute_cmd may take (default 600)
  BBS_ROUTER_TIMEOUT                milliseconds a model call may take (default 600000)
  BBS_SHUTDOWN_TIMEOUT              seconds to wait for sessions at shutdown (default 30)
  BBS_MAX_REQUEST_MB                largest request body (default 16; 413 above it)
  BBS_INSIDE_SANDBOX=1              the server runs inside a sandbox (execute_cmd allowed)
`;

// No flags but --help: an unknown one is refused before anything listens.
try {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: { help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    process.stdout.write(usage);
    process.exit(0);
  }
} catch (error) {
  process.stderr.write(`dressage-blackbox-server: ${(error as Error).message}\n\n${usage}`);
  process.exit(2);
}

const config = blackboxConfigFromEnv();
const apiKey = blackboxApiKeyFromEnv();
// Children (the agent, execute_cmd) must not inherit the key.
delete process.env.BBS_API_KEY;
// BBS_SOCKET and BBS_UPSTREAM_SOCKET: a pool slot in its own network namespace, whose only ways in
// and out are unix sockets in the slot's directory.
const server = new BlackboxServer({
  config,
  adapters: builtinAdapters,
  apiKey,
  socketPath: process.env.BBS_SOCKET || undefined,
  upstreamSocket: process.env.BBS_UPSTREAM_SOCKET || undefined,
});
const url = await server.listen();
const reach = url.endsWith(server.boundAddress ?? '') ? '' : `reached here at ${url}; `;
const auth = apiKey === undefined ? 'no auth' : 'bearer key required';
const sandbox = config.inside_sandbox ? 'inside a sandbox' : 'outside a sandbox: execute_cmd refused';
console.error(
  `dressage-blackbox-server listening on ${url.startsWith('unix:') ? url : `http://${server.boundAddress}`} (${reach}${auth}; ${sandbox})`,
);
if (!url.startsWith('unix:') && !isLoopbackAddress(config.host) && apiKey === undefined) {
  console.error(
    `dressage-blackbox-server: warning: listening on ${server.boundAddress} without a key: anyone who reaches this port can drive the agent (set BBS_API_KEY_FILE)`,
  );
}
const stop = () => {
  server.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
