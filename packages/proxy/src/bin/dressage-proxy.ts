#!/usr/bin/env -S node --max-semi-space-size=128
// A larger young generation: hundreds of concurrent calls keep their request objects alive across
// engine round trips, and with V8's default semi-space they get promoted and collected as old
// objects (about 20% of the proxy's CPU per request at 512 sessions; 128 MiB semi-spaces take
// another ~4% off 64 MiB ones). Embedders and other launchers pass the flag themselves
// (`node --max-semi-space-size=128 …` or NODE_OPTIONS).
import { DressageError } from '@dressage/protocol';
import { isLoopbackAddress } from '@dressage/protocol/internal';
import { parseProxyArguments, usage } from '../config.js';
import { startProxyServer } from '../server.js';

async function main(): Promise<void> {
  const parsed = parseProxyArguments(process.argv.slice(2));
  if (parsed.help) {
    process.stdout.write(usage);
    return;
  }
  const config = parsed.config;
  const proxy = await startProxyServer(config);
  const reach = proxy.url.endsWith(proxy.boundAddress) ? '' : `reached here at ${proxy.url}; `;
  const auth = config.apiKey === 'no-auth' ? 'no auth' : 'bearer key required';
  process.stdout.write(
    `dressage-proxy listening on http://${proxy.boundAddress} (${reach}${auth}; router ${config.sglangRouterUrl})\n`,
  );
  if (!isLoopbackAddress(config.host) && config.apiKey === 'no-auth') {
    process.stderr.write(
      `dressage-proxy: warning: listening on ${proxy.boundAddress} without a key: anyone who reaches this port can drive the engine and read trajectories (set --api-key-file)\n`,
    );
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`dressage-proxy: ${signal}, shutting down\n`);
    proxy.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

main().catch((error: unknown) => {
  const message = DressageError.isInstance(error) ? error.message : String(error);
  process.stderr.write(`dressage-proxy: ${message}\n`);
  process.exit(2);
});
