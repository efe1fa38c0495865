import { connect, type Settings } from 'node:http2';
import { DressageError } from '@dressage/protocol';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_FLOW_CONTROL_WINDOW_BYTES, widenServerFlowControlWindow } from './grpc-limits.js';
import {
  type RunningTrainerServer,
  startTrainerServer,
  type TrainerImplementation,
} from './trainer-server.js';

const sink: TrainerImplementation = {
  getInfo: () => ({}),
  train: (_header, batch) => ({ samples_trained: batch.sample_count }),
  updateWeights: () => ({}),
  saveCheckpoint: () => ({}),
  loadCheckpoint: () => ({}),
};

const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

// What a plain HTTP/2 client learns of the server's receive window: the stream window from its
// SETTINGS (the last one that carries it), the connection window from its WINDOW_UPDATE.
async function advertisedWindows(address: string): Promise<{ stream: number; connection: number }> {
  const session = connect(`http://${address}`);
  cleanups.push(() => new Promise<void>((resolve) => session.close(() => resolve())));
  let latest: Settings = {};
  session.on('remoteSettings', (settings) => {
    latest = settings;
  });
  await new Promise<void>((resolve, reject) => {
    session.once('error', reject);
    session.once('remoteSettings', () => resolve());
  });
  // The server queues any further SETTINGS and its WINDOW_UPDATE when the connection opens, so
  // both have arrived by the time it answers a ping.
  await new Promise<void>((resolve, reject) => session.ping((error) => (error ? reject(error) : resolve())));
  return { stream: latest.initialWindowSize ?? 0, connection: session.state.remoteWindowSize ?? 0 };
}

async function start(options: Parameters<typeof startTrainerServer>[1] = {}): Promise<RunningTrainerServer> {
  const server = await startTrainerServer(sink, options);
  cleanups.push(() => server.close(100));
  return server;
}

describe('the trainer server flow-control window', () => {
  it('grants 8 MiB per stream and per connection by default', async () => {
    const server = await start();
    expect(await advertisedWindows(server.address)).toEqual({
      stream: DEFAULT_FLOW_CONTROL_WINDOW_BYTES,
      connection: DEFAULT_FLOW_CONTROL_WINDOW_BYTES,
    });
  });

  it('grants the configured size, or keeps HTTP/2 defaults with null', async () => {
    const widened = await start({ flowControlWindowBytes: 1 << 20 });
    expect(await advertisedWindows(widened.address)).toEqual({ stream: 1 << 20, connection: 1 << 20 });
    const plain = await start({ flowControlWindowBytes: null });
    expect(await advertisedWindows(plain.address)).toEqual({ stream: 65_535, connection: 65_535 });
  });

  it('widens a grpc-js server bound by the caller', async () => {
    const server = new Server();
    cleanups.push(() => {
      server.forceShutdown();
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) =>
        error ? reject(error) : resolve(bound),
      ),
    );
    expect(widenServerFlowControlWindow(server, 4 << 20)).toBe(1);
    expect(await advertisedWindows(`127.0.0.1:${port}`)).toEqual({ stream: 4 << 20, connection: 4 << 20 });
  });

  it('rejects a window HTTP/2 cannot express, before listening', async () => {
    for (const windowBytes of [1000, 2 ** 31, 1.5]) {
      const error = await start({ flowControlWindowBytes: windowBytes }).then(
        () => null,
        (caught: unknown) => caught,
      );
      expect(DressageError.isInstance(error)).toBe(true);
      expect((error as DressageError).code).toBe('invalid_argument');
    }
  });
});
