import type { Http2Server, ServerHttp2Session } from 'node:http2';
import { DressageError } from '@dressage/protocol';
import type { ChannelOptions, Server } from '@grpc/grpc-js';

/**
 * Largest message either side accepts by default: 64 MiB. gRPC's own default (4 MiB) is below one
 * sample of a long agent trajectory; chunks are 4 MiB by default, so this leaves room for a single
 * oversized sample without inviting unbounded allocations.
 */
export const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/** Target size of one streamed sample block (`trainBatchToChunks`' default). */
export const DEFAULT_MAX_CHUNK_BYTES = 4 * 1024 * 1024;

/**
 * HTTP/2 receive window a trainer server grants each connection and each stream: 8 MiB, two default
 * chunks. HTTP/2's default (64 KiB) makes a Train upload wait for a WINDOW_UPDATE round trip every
 * 32 KiB or so, which costs the sender and the receiver a wake-up each.
 */
export const DEFAULT_FLOW_CONTROL_WINDOW_BYTES = 8 * 1024 * 1024;

/** Channel options raising grpc-js' send and receive limits to `maxMessageBytes` (both directions). */
export function messageLimitOptions(maxMessageBytes: number = DEFAULT_MAX_MESSAGE_BYTES): ChannelOptions {
  return {
    'grpc.max_receive_message_length': maxMessageBytes,
    'grpc.max_send_message_length': maxMessageBytes,
  };
}

// HTTP/2 bounds of SETTINGS_INITIAL_WINDOW_SIZE.
const MIN_WINDOW = 65_535;
const MAX_WINDOW = 2 ** 31 - 1;

const widenedServers = new WeakMap<Http2Server, number>();

/** Throws an `invalid_argument` DressageError unless `windowBytes` is a valid HTTP/2 window size. */
export function checkFlowControlWindow(windowBytes: number): void {
  if (!Number.isInteger(windowBytes) || windowBytes < MIN_WINDOW || windowBytes > MAX_WINDOW) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `flow-control window must be an integer from ${MIN_WINDOW} to ${MAX_WINDOW} bytes, got ${windowBytes}`,
      details: { window_bytes: windowBytes },
    });
  }
}

/**
 * Grants `windowBytes` of HTTP/2 receive window (per connection and per stream) on every connection
 * that the ports a grpc-js server has bound so far accept from now on. Call it after `bindAsync`
 * (startTrainerServer does), and again after binding more ports.
 * grpc-js has a client option for this (`grpc-node.flow_control_window`) but no server one, so this
 * reaches the server's HTTP/2 listeners through grpc-js' internal `http2Servers` map; returns the
 * number of listeners configured, 0 when that map is absent (the server then keeps HTTP/2's default).
 */
export function widenServerFlowControlWindow(
  server: Server,
  windowBytes: number = DEFAULT_FLOW_CONTROL_WINDOW_BYTES,
): number {
  checkFlowControlWindow(windowBytes);
  const listeners = (server as unknown as { http2Servers?: unknown }).http2Servers;
  if (!(listeners instanceof Map)) return 0;
  let configured = 0;
  for (const listener of listeners.keys() as IterableIterator<Http2Server>) {
    if (typeof listener?.on !== 'function') continue;
    configured += 1;
    const previous = widenedServers.get(listener);
    widenedServers.set(listener, windowBytes);
    // One listener per HTTP/2 server; a second call only changes the size it grants.
    if (previous !== undefined) continue;
    listener.on('session', (session: ServerHttp2Session) => {
      const size = widenedServers.get(listener) ?? windowBytes;
      try {
        session.setLocalWindowSize(size);
        session.settings({ initialWindowSize: size });
      } catch {
        // A session that closed before it started keeps its defaults; nothing to widen.
      }
    });
  }
  return configured;
}
