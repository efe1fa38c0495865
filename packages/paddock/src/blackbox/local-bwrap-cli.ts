import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { sleep } from '@dressage/protocol/internal';
import { LocalBwrapPool, type PoolMode, readPoolState } from '@dressage/sandbox';
import { blackboxSlotServer } from './slot-server.js';

const usage = `Usage: dressage-local-bwrap <start|status|stop> [options]
  start   --slots N --base-dir DIR --mode blackbox|command_only --base-port P
          [--upstream http://HOST:PORT]  the recording proxy blackbox slots may reach
          [--upstream-api-key-file FILE] its key (or DRESSAGE_LOCAL_BWRAP_UPSTREAM_API_KEY)
          [--unshare-net | --host-net]   own network namespace per slot (default in blackbox mode)
          [--disk-limit-mb N]            what a slot may write, enforced by a tmpfs as root (default 4096; 0 = none)
  status  --base-dir DIR      prints the pool's pool.json (exit 1 when no live pool)
  stop    --base-dir DIR      stops the pool started there (SIGTERM, then waits)`;

function defaultBaseDir(): string {
  return process.env.DRESSAGE_LOCAL_BWRAP_SLOT_BASE_DIR ?? '/tmp/dressage-local-bwrap/node-local';
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function parseCommandLine(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: {
      slots: { type: 'string' },
      'base-dir': { type: 'string' },
      mode: { type: 'string' },
      'base-port': { type: 'string' },
      'unshare-net': { type: 'boolean' },
      'host-net': { type: 'boolean' },
      upstream: { type: 'string' },
      'upstream-api-key-file': { type: 'string' },
      'disk-limit-mb': { type: 'string' },
      help: { type: 'boolean' },
    },
  });
}

/** The `dressage-local-bwrap` command line; returns the exit code. */
export async function runLocalBwrapCli(argv: readonly string[]): Promise<number> {
  let parsed: ReturnType<typeof parseCommandLine>;
  try {
    parsed = parseCommandLine(argv);
  } catch (error) {
    // An unknown flag or a missing value: a usage error, named, exit 2.
    console.error(`dressage-local-bwrap: ${(error as Error).message}\n\n${usage}`);
    return 2;
  }
  const { positionals, values } = parsed;
  const command = positionals[0];
  const baseDir = values['base-dir'] ?? defaultBaseDir();
  if (values.help || command === undefined) {
    console.log(usage);
    return command === undefined && !values.help ? 2 : 0;
  }
  if (command === 'status') {
    const state = await readPoolState(baseDir);
    if (state === null || !alive(state.pid)) {
      console.log(JSON.stringify({ running: false, baseDir }));
      return 1;
    }
    console.log(JSON.stringify({ running: true, ...state }, null, 2));
    return 0;
  }
  if (command === 'stop') {
    const state = await readPoolState(baseDir);
    if (state === null || !alive(state.pid)) {
      console.log(JSON.stringify({ stopped: false, reason: 'no live pool', baseDir }));
      return 0;
    }
    process.kill(state.pid, 'SIGTERM');
    for (let i = 0; i < 300 && alive(state.pid); i++) await sleep(100);
    console.log(JSON.stringify({ stopped: !alive(state.pid), pid: state.pid }));
    return alive(state.pid) ? 1 : 0;
  }
  if (command === 'start') {
    const diskText = values['disk-limit-mb'] ?? process.env.DRESSAGE_LOCAL_BWRAP_DISK_LIMIT_MB;
    const diskMb = diskText === undefined ? undefined : Number(diskText);
    if (diskMb !== undefined && !(Number.isInteger(diskMb) && diskMb >= 0)) {
      console.error(`dressage-local-bwrap: --disk-limit-mb must be a whole number of MiB, got ${diskText}`);
      return 2;
    }
    const mode = (values.mode ?? process.env.DRESSAGE_LOCAL_BWRAP_POOL_MODE ?? 'blackbox') as PoolMode;
    const keyFile = values['upstream-api-key-file'];
    const upstreamApiKey =
      keyFile === undefined
        ? process.env.DRESSAGE_LOCAL_BWRAP_UPSTREAM_API_KEY || undefined
        : (await readFile(keyFile, 'utf8')).trim();
    const pool = new LocalBwrapPool({
      slots: Number(values.slots ?? process.env.DRESSAGE_LOCAL_BWRAP_TOTAL_SERVERS ?? 4),
      baseDir,
      mode,
      ...(mode === 'blackbox' ? { server: blackboxSlotServer() } : {}),
      basePort: Number(values['base-port'] ?? process.env.DRESSAGE_LOCAL_BWRAP_BASE_PORT ?? 31000),
      unshareNet: values['host-net'] ? false : values['unshare-net'],
      upstreamUrl: values.upstream ?? process.env.DRESSAGE_LOCAL_BWRAP_UPSTREAM_URL,
      upstreamApiKey,
      ...(diskMb === undefined ? {} : { diskLimitBytes: diskMb * 1024 * 1024 }),
    });
    await pool.start();
    console.log(JSON.stringify(pool.status()));
    await new Promise<void>((resolve) => {
      process.once('SIGTERM', resolve);
      process.once('SIGINT', resolve);
    });
    await pool.stop({ keepDirectories: false });
    return 0;
  }
  console.error(usage);
  return 2;
}
