#!/usr/bin/env -S node --max-semi-space-size=128
// A larger young generation: hundreds of concurrent calls keep their request objects alive across
// engine round trips, and with V8's default semi-space they get promoted and collected as old
// objects (about 20% of the proxy's CPU per request at 512 sessions; 128 MiB semi-spaces take
// another ~4% off 64 MiB ones). Embedders and other launchers pass the flag themselves
// (`node --max-semi-space-size=128 …` or NODE_OPTIONS).
import { DressageError } from '@dressage/protocol';
import { parseProxyArguments, usage } from '../config.js';
import { startProxyServer } from '../server.js';

async function main(): Promise<void> {
  const parsed = parseProxyArguments(process.argv.slice(2));
  if (parsed.help) {
    process.stdout.write(usage);
    return;
  }
  const proxy = await startProxyServer(parsed.config);
  process.stdout.write(
    `dressage-proxy listening on ${proxy.url} (router ${parsed.config.sglangRouterUrl})\n`,
  );
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
