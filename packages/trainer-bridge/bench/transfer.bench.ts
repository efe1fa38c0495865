// TrainBatch transfer over loopback gRPC, TS→TS and TS→Python, against a raw TCP copy of the same
// bytes to the same kind of receiver, measured in the same run. Each receiver runs in its own process.
// Timings alternate in blocks (gRPC, raw, gRPC, raw, ...; best of each), so a change in the machine's
// load hits both; blocks rather than single runs, so a raw copy never runs while the receiver still
// collects the garbage of a gRPC transfer just before it.
//
//   pnpm --filter @dressage/trainer-bridge bench            (runs the convert benchmark first)
//   node --import tsx bench/transfer.bench.ts [--samples 2048 --tokens 4096 --response 1024 --repeats 5 --rounds 2]
//                                            [--merge file.json] [--no-python]
//
// The last output line is one JSON object of headline figures, merged with `--merge`'s when given.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { PackedTrainBatch } from '@dressage/protocol';
// Only the modules a transfer uses (not the package index, which also loads TensorFlow.js): the
// heap a process carries is what each garbage collection walks.
import { createSyntheticTrainBatch } from '../src/synthetic-batch.js';
import { createTrainerClient } from '../src/trainer-client.js';

const { values } = parseArgs({
  options: {
    samples: { type: 'string', default: '2048' },
    tokens: { type: 'string', default: '4096' },
    response: { type: 'string', default: '1024' },
    repeats: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '2' },
    merge: { type: 'string' },
    'no-python': { type: 'boolean', default: false },
  },
});
const here = dirname(fileURLToPath(import.meta.url));
const workerRoot = join(here, '../../../apps/megatron-worker');
const repeats = Number(values.repeats);
const rounds = Number(values.rounds);

function startProcess(
  command: string,
  args: string[],
  cwd: string,
): Promise<{ child: ChildProcess; line: string }> {
  const child = spawn(command, args, { cwd, stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let output = '';
    child.stdout?.on('data', (data: Buffer) => {
      output += data.toString();
      const newline = output.indexOf('\n');
      if (newline >= 0) resolve({ child, line: output.slice(0, newline) });
    });
    child.once('exit', (code) => reject(new Error(`${command} ${args.join(' ')} exited with ${code}`)));
  });
}

function stopProcess(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.stdin?.end();
    setTimeout(() => child.kill('SIGTERM'), 2000).unref();
  });
}

function columns(batch: PackedTrainBatch): Uint8Array[] {
  return Object.values(batch)
    .filter((value): value is ArrayBufferView => ArrayBuffer.isView(value))
    .map((view) => new Uint8Array(view.buffer, view.byteOffset, view.byteLength));
}

// One raw copy: the length, then every column's bytes, then wait for the receiver's ack.
async function rawCopy(socket: Socket, parts: Uint8Array[], total: number): Promise<void> {
  const header = Buffer.alloc(8);
  header.writeBigUInt64LE(BigInt(total));
  const acked = new Promise<void>((resolve) => socket.once('data', () => resolve()));
  socket.write(header);
  for (const part of parts) {
    if (!socket.write(part)) await new Promise((resolve) => socket.once('drain', resolve));
  }
  await acked;
}

async function timeBest(run: () => Promise<void>): Promise<number> {
  await run(); // warm-up: connections, JIT, buffers
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < repeats; i++) {
    const start = performance.now();
    await run();
    best = Math.min(best, performance.now() - start);
  }
  return best / 1000;
}

async function measure(
  name: string,
  grpcAddress: string,
  rawPort: number,
  batch: PackedTrainBatch,
  bytes: number,
) {
  const client = createTrainerClient(grpcAddress);
  const socket = connect(rawPort, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.setNoDelay(true);
  const parts = columns(batch);
  let grpcSeconds = Number.POSITIVE_INFINITY;
  let rawSeconds = Number.POSITIVE_INFINITY;
  for (let round = 0; round < rounds; round++) {
    const grpc = await timeBest(async () => {
      const response = await client.train(batch);
      if (response.tokens_trained !== batch.tokens.length) throw new Error(`${name}: tokens lost`);
    });
    grpcSeconds = Math.min(grpcSeconds, grpc);
    rawSeconds = Math.min(rawSeconds, await timeBest(() => rawCopy(socket, parts, bytes)));
  }
  client.close();
  socket.destroy();
  const grpcMBps = bytes / grpcSeconds / 1e6;
  const rawMBps = bytes / rawSeconds / 1e6;
  console.log(
    `${name}: gRPC ${grpcMBps.toFixed(0)} MB/s (${(grpcSeconds * 1000).toFixed(0)} ms), raw socket ${rawMBps.toFixed(0)} MB/s (${(rawSeconds * 1000).toFixed(0)} ms), ratio ${((grpcMBps / rawMBps) * 100).toFixed(1)}% (target ≥ 50%)`,
  );
  return { grpcMBps, rawMBps, ratio: grpcMBps / rawMBps };
}

const batch = createSyntheticTrainBatch({
  samples: Number(values.samples),
  tokensPerSample: Number(values.tokens),
  responseTokens: Number(values.response),
});
const bytes = columns(batch).reduce((sum, part) => sum + part.byteLength, 0);
console.log(
  `batch: ${batch.sample_count} samples, ${batch.tokens.length} tokens, ${(bytes / 1e6).toFixed(1)} MB packed; best of ${repeats} runs in each of ${rounds} rounds`,
);

const receiver = await startProcess(
  process.execPath,
  ['--import', 'tsx', join(here, 'transfer-receiver.ts')],
  join(here, '..'),
);
const [, grpcPort, , rawPort] = receiver.line.split(' ');
const typescript = await measure('TS → TS', `127.0.0.1:${grpcPort}`, Number(rawPort), batch, bytes);
await stopProcess(receiver.child);

let python: Awaited<ReturnType<typeof measure>> | null = null;
if (!values['no-python'] && existsSync('/usr/bin/python3')) {
  const worker = await startProcess(
    '/usr/bin/python3',
    ['-m', 'dressage_megatron_worker', '--port', '0', '--actor', 'sink'],
    workerRoot,
  );
  const sink = await startProcess(
    '/usr/bin/python3',
    ['-m', 'dressage_megatron_worker.raw_sink'],
    workerRoot,
  );
  const port = (line: string) => line.slice(line.lastIndexOf(':') + 1);
  python = await measure(
    'TS → Python',
    `127.0.0.1:${port(worker.line)}`,
    Number(port(sink.line)),
    batch,
    bytes,
  );
  sink.child.kill('SIGTERM');
  await stopProcess(worker.child);
}

let merged: Record<string, unknown> = {};
if (values.merge !== undefined && existsSync(values.merge)) {
  merged = JSON.parse(readFileSync(values.merge, 'utf8')) as Record<string, unknown>;
  rmSync(values.merge);
}
const round = (value: number, digits = 1) => Number(value.toFixed(digits));
console.log(
  JSON.stringify({
    ...merged,
    transfer_tokens: batch.tokens.length,
    transfer_bytes: bytes,
    transfer_ts_ts_grpc_mb_per_second: round(typescript.grpcMBps),
    transfer_ts_ts_raw_mb_per_second: round(typescript.rawMBps),
    transfer_ts_ts_ratio: round(typescript.ratio, 4),
    transfer_ts_python_grpc_mb_per_second: python ? round(python.grpcMBps) : null,
    transfer_ts_python_raw_mb_per_second: python ? round(python.rawMBps) : null,
    transfer_ts_python_ratio: python ? round(python.ratio, 4) : null,
    meets_transfer_target: typescript.ratio >= 0.5 && (python === null || python.ratio >= 0.5),
  }),
);
