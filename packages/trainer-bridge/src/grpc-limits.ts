import type { ChannelOptions } from '@grpc/grpc-js';

/**
 * Largest message either side accepts by default: 64 MiB. gRPC's own default (4 MiB) is below one
 * sample of a long agent trajectory; chunks are 4 MiB by default, so this leaves room for a single
 * oversized sample without inviting unbounded allocations.
 */
export const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/** Target size of one streamed sample block (`trainBatchToChunks`' default). */
export const DEFAULT_MAX_CHUNK_BYTES = 4 * 1024 * 1024;

/** Channel options raising grpc-js' send and receive limits to `maxMessageBytes` (both directions). */
export function messageLimitOptions(maxMessageBytes: number = DEFAULT_MAX_MESSAGE_BYTES): ChannelOptions {
  return {
    'grpc.max_receive_message_length': maxMessageBytes,
    'grpc.max_send_message_length': maxMessageBytes,
  };
}
