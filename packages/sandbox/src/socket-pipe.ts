import { chmod, chown, rm } from 'node:fs/promises';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';

/** A TCP address or a unix socket path. */
export type SocketAddress = { host: string; port: number } | { path: string };

/** Options of {@link startSocketPipe}. */
export interface SocketPipeOptions {
  /** Where the pipe listens. A unix socket path is replaced if a stale file is there. */
  listen: SocketAddress;
  /** Where every accepted connection is piped to; the pipe connects nowhere else. */
  target: SocketAddress;
  /** Owner of a unix socket the pipe listens on (the slot's uid, so the sandbox may connect). */
  owner?: { uid: number; gid: number };
}

/** A running {@link startSocketPipe}. */
export interface SocketPipe {
  /** The TCP port it listens on (0 on a unix socket). */
  readonly port: number;
  /** Stops listening and cuts every open connection. */
  close(): Promise<void>;
}

/**
 * Listens on one address and pipes each connection, byte for byte, to one fixed target. Pool slots
 * live in their own network namespace; these pipes are their only ways in and out (the pool to the
 * slot's server socket, the slot's LLM proxy to the recording proxy).
 */
export async function startSocketPipe(options: SocketPipeOptions): Promise<SocketPipe> {
  const open = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = 'path' in options.target ? connect(options.target.path) : connect(options.target);
    open.add(client);
    open.add(upstream);
    const cut = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', cut).on('close', cut);
    upstream.on('error', cut).on('close', cut);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  const { listen } = options;
  if ('path' in listen) await rm(listen.path, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if ('path' in listen) server.listen(listen.path, resolve);
    else server.listen(listen.port, listen.host, resolve);
  });
  if ('path' in listen) {
    // Connecting to a unix socket needs write permission on it: only its owner gets that.
    if (options.owner) await chown(listen.path, options.owner.uid, options.owner.gid);
    await chmod(listen.path, 0o600);
  }
  const address = server.address();
  return {
    port: typeof address === 'object' && address !== null ? (address as AddressInfo).port : 0,
    close: async () => {
      for (const socket of open) socket.destroy();
      open.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
