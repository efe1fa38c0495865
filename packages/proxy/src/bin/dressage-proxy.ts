#!/usr/bin/env -S node --max-semi-space-size=128 --incremental-marking-soft-trigger=50 --incremental-marking-hard-trigger=90 --heap-growing-percent=100
// The V8 flags of a proxy process (`proxyNodeFlags`, node-flags.ts, says why each). Embedders and
// other launchers pass them themselves (`node <flags> …`; NODE_OPTIONS refuses them); `dressage proxy` does.
import { parseArgs } from 'node:util';
import { DressageError } from '@dressage/protocol';
import { isLoopbackAddress } from '@dressage/protocol/internal';
import { parseProxyArguments, usage } from '../config.js';
import { installHeapGrowthPolicy } from '../heap-growth.js';
import { startProxyServer } from '../server.js';
import { repairStore, type StoreRecovery } from '../trajectory-store.js';

function age(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 120) return `${seconds} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172_800) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86_400)} days`;
}

// What the store replayed: a new run's store starts empty; anything else is named with its age.
function describeRecovery(directory: string, recovery: StoreRecovery): string {
  const adopted = recovery.adoptedFrom === null ? '' : `, adopted from run ${recovery.adoptedFrom}`;
  const head = `store ${directory} (run ${recovery.runId}${adopted})`;
  if (recovery.trajectories === 0 || recovery.oldestFinalizedAt === null) return `${head}: empty`;
  const now = Date.now();
  const newest = recovery.newestFinalizedAt ?? recovery.oldestFinalizedAt;
  return `${head}: recovered ${recovery.trajectories} trajectories not yet read, finalized ${age(now - recovery.oldestFinalizedAt)} to ${age(now - newest)} ago`;
}

const repairUsage = `Usage: dressage-proxy repair-store --store-dir DIR

Moves the lines of DIR/trajectories.jsonl that are not records (a damaged log keeps the proxy from
starting) to DIR/trajectories.quarantine.jsonl, byte for byte, and keeps the rest.
`;

// `repair-store`: the way forward the proxy names when a damaged log keeps it from starting.
async function repair(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { 'store-dir': { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    process.stdout.write(repairUsage);
    return;
  }
  const directory = values['store-dir'];
  if (directory === undefined)
    throw new DressageError({
      code: 'invalid_argument',
      message: `--store-dir is required\n\n${repairUsage}`,
    });
  const result = await repairStore(directory);
  process.stdout.write(
    result.moved === 0
      ? `dressage-proxy: ${directory}: every line of the log is a record (${result.kept}); nothing moved\n`
      : `dressage-proxy: ${directory}: moved ${result.moved} damaged line${result.moved === 1 ? '' : 's'} to ${result.quarantine}; ${result.kept} kept\n`,
  );
}

async function main(): Promise<void> {
  if (process.argv[2] === 'repair-store') return repair(process.argv.slice(3));
  const parsed = parseProxyArguments(process.argv.slice(2));
  if (parsed.help) {
    process.stdout.write(usage);
    return;
  }
  const config = parsed.config;
  // The room between full collections stays bounded as sessions pile up (heap-growth.ts).
  installHeapGrowthPolicy();
  const proxy = await startProxyServer(config);
  // What the store recovered, before the listening line a launcher waits for.
  const recovery = proxy.service.store.recovery;
  if (recovery !== null) {
    for (const note of recovery.notes) process.stdout.write(`dressage-proxy: ${note}\n`);
    process.stdout.write(`dressage-proxy: ${describeRecovery(config.storeDirectory as string, recovery)}\n`);
  }
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
