#!/usr/bin/env node
// dressage-blackbox-server: serves the BlackboxServer API with the built-in agent adapters. Settings
// come from the BBS_* environment variables; the bearer key from BBS_API_KEY_FILE or BBS_API_KEY.
import { isLoopbackAddress } from '@dressage/protocol/internal';
import { builtinAdapters } from '../adapters/index.js';
import { blackboxApiKeyFromEnv, blackboxConfigFromEnv } from '../blackbox/config.js';
import { BlackboxServer } from '../blackbox/server.js';

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
