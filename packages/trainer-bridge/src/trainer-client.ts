import { randomUUID } from 'node:crypto';
import {
  DressageError,
  type GetInfoResponse,
  HealthRequest,
  type HealthResponse,
  LoadCheckpointRequest,
  type LoadCheckpointResponse,
  type LossConfig,
  type PackedTrainBatch,
  SaveCheckpointRequest,
  type SaveCheckpointResponse,
  type TrainBatchHeader,
  type TrainChunk,
  type TrainerServiceClient,
  type TrainResponse,
  UpdateWeightsRequest,
  type UpdateWeightsResponse,
} from '@dressage/protocol';
import { trainBatchToChunks } from '@dressage/protocol/internal';
import {
  type CallOptions,
  type ChannelCredentials,
  type ChannelOptions,
  type ClientUnaryCall,
  credentials as grpcCredentials,
  Metadata,
  makeGenericClientConstructor,
  type ServiceError,
} from '@grpc/grpc-js';
import { errorFromGrpc } from './grpc-errors.js';
import { DEFAULT_MAX_CHUNK_BYTES, DEFAULT_MAX_MESSAGE_BYTES, messageLimitOptions } from './grpc-limits.js';
import { directlyFramedTrainerServiceDefinition, trainerServiceDefinition } from './train-chunk-codec.js';

/** Options of {@link createTrainerClient}. */
export interface TrainerClientOptions {
  /** Largest message sent or received; match the server's. Default 64 MiB. */
  maxMessageBytes?: number;
  /** Default insecure (loopback and private cluster networks). */
  credentials?: ChannelCredentials;
  /** Extra grpc-js channel options (they override the message limits when they set the same keys). */
  channelOptions?: ChannelOptions;
  /** Deadline of unary calls, in milliseconds. Default 60 s. */
  deadlineMs?: number;
  /** Deadline of a Train call (streaming plus the training step). Default 1 hour. */
  trainDeadlineMs?: number;
  /**
   * Encode each sample block straight into the frame grpc-js sends (one copy of every column instead
   * of two; same bytes on the wire). Default true; always off when the channel compresses messages.
   */
  directFraming?: boolean;
}

/** Per-call options. */
export interface TrainerCallOptions {
  /** Cancels the call; the returned promise rejects with a `cancelled` DressageError. */
  signal?: AbortSignal;
  /** Overrides the client's deadline for this call. */
  deadlineMs?: number;
}

/** Header fields of a Train call; counts are filled from the batch. */
export interface TrainHeaderInput {
  /** Default: a random UUID. */
  batch_id?: string;
  rollout_id?: number;
  /** Rollouts per optimizer step. Default: the number of distinct rollout ids in the batch. */
  global_batch_size?: number;
  /** Unset fields take the trainer's defaults. */
  loss?: Partial<LossConfig>;
  expected_weight_version?: string;
}

/** Options of {@link TrainerClient.train}. */
export interface TrainOptions extends TrainerCallOptions {
  /** Upper bound on one streamed sample block. Default 4 MiB; must stay below both sides' message limit. */
  maxChunkBytes?: number;
}

type UnaryMethod<TRequest, TResponse> = (
  request: TRequest,
  metadata: Metadata,
  options: Partial<CallOptions>,
  callback: (error: ServiceError | null, response: TResponse) => void,
) => ClientUnaryCall;

// The generated client with the fast TrainChunk codec (same wire format), and the one that also
// writes sample blocks straight into grpc-js' frames (channels without compression).
const FastTrainerServiceClient = makeGenericClientConstructor(
  trainerServiceDefinition,
  'dressage.trainer.v1.TrainerService',
) as unknown as typeof TrainerServiceClient;
const DirectlyFramedTrainerServiceClient = makeGenericClientConstructor(
  directlyFramedTrainerServiceDefinition,
  'dressage.trainer.v1.TrainerService',
) as unknown as typeof TrainerServiceClient;

// Channel options under which grpc-js compresses outgoing messages (it then needs their bytes).
function compressesMessages(options: ChannelOptions): boolean {
  const algorithm = options['grpc.default_compression_algorithm'];
  return algorithm !== undefined && algorithm !== 0;
}

function distinctCount(values: Int32Array): number {
  return new Set(values).size;
}

/**
 * A TrainerService client: streams packed batches in size-bounded chunks with backpressure, applies
 * deadlines and cancellation, and turns every failure into a DressageError (`unavailable` when the
 * trainer cannot be reached, the trainer's own code when it rejects a request).
 */
export class TrainerClient {
  /** The underlying grpc-js client, for anything this wrapper does not cover. */
  readonly grpcClient: TrainerServiceClient;
  readonly address: string;
  readonly #deadlineMs: number;
  readonly #trainDeadlineMs: number;

  constructor(address: string, options: TrainerClientOptions = {}) {
    this.address = address;
    this.#deadlineMs = options.deadlineMs ?? 60_000;
    this.#trainDeadlineMs = options.trainDeadlineMs ?? 3_600_000;
    const channelOptions = {
      ...messageLimitOptions(options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES),
      ...options.channelOptions,
    };
    const Client =
      options.directFraming !== false && !compressesMessages(channelOptions)
        ? DirectlyFramedTrainerServiceClient
        : FastTrainerServiceClient;
    this.grpcClient = new Client(
      address,
      options.credentials ?? grpcCredentials.createInsecure(),
      channelOptions,
    );
  }

  /** Describes the trainer (model, limits, weight version, backend). */
  getInfo(options: TrainerCallOptions = {}): Promise<GetInfoResponse> {
    return this.#unary('GetInfo', this.grpcClient.getInfo, {}, options);
  }

  /** The trainer's health; `STATUS_BUSY` while it trains or updates weights. */
  health(options: TrainerCallOptions = {}): Promise<HealthResponse> {
    return this.#unary('Health', this.grpcClient.health, HealthRequest.fromPartial({}), options);
  }

  /** Publishes trained weights to the inference engines; resolves to the new weight version. */
  updateWeights(
    request: Partial<UpdateWeightsRequest> = {},
    options: TrainerCallOptions = {},
  ): Promise<UpdateWeightsResponse> {
    return this.#unary(
      'UpdateWeights',
      this.grpcClient.updateWeights,
      UpdateWeightsRequest.fromPartial(request),
      options,
    );
  }

  saveCheckpoint(
    request: Partial<SaveCheckpointRequest>,
    options: TrainerCallOptions = {},
  ): Promise<SaveCheckpointResponse> {
    return this.#unary(
      'SaveCheckpoint',
      this.grpcClient.saveCheckpoint,
      SaveCheckpointRequest.fromPartial(request),
      options,
    );
  }

  loadCheckpoint(
    request: Partial<LoadCheckpointRequest>,
    options: TrainerCallOptions = {},
  ): Promise<LoadCheckpointResponse> {
    return this.#unary(
      'LoadCheckpoint',
      this.grpcClient.loadCheckpoint,
      LoadCheckpointRequest.fromPartial(request),
      options,
    );
  }

  /**
   * Streams one packed batch (`convertSamplesToPackedTrainBatch`) to the trainer and resolves to its
   * TrainResponse once the trainer has trained on it. Blocks are views over the batch's arrays, so
   * do not modify the batch until the promise settles.
   */
  train(
    batch: PackedTrainBatch,
    header: TrainHeaderInput = {},
    options: TrainOptions = {},
  ): Promise<TrainResponse> {
    const fullHeader: Omit<TrainBatchHeader, 'sample_count' | 'token_count'> = {
      batch_id: header.batch_id ?? randomUUID(),
      rollout_id: header.rollout_id ?? 0,
      global_batch_size: header.global_batch_size ?? distinctCount(batch.rollout_ids),
      loss: header.loss === undefined ? undefined : { ...header.loss },
      expected_weight_version: header.expected_weight_version ?? '',
    };
    const chunks = trainBatchToChunks(batch, fullHeader, {
      maxChunkBytes: options.maxChunkBytes ?? DEFAULT_MAX_CHUNK_BYTES,
    });
    const context = { address: this.address, method: 'Train' };
    return new Promise<TrainResponse>((resolve, reject) => {
      if (options.signal?.aborted) {
        reject(cancelledBeforeStart(context.method, this.address));
        return;
      }
      let settled = false;
      const deadline = Date.now() + (options.deadlineMs ?? this.#trainDeadlineMs);
      const call = this.grpcClient.train(new Metadata(), { deadline }, (error, response) => {
        settled = true;
        options.signal?.removeEventListener('abort', onAbort);
        call.removeListener('drain', writeMore);
        if (error) reject(errorFromGrpc(error, context));
        else resolve(response);
      });
      const onAbort = () => call.cancel();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      let next = 0;
      // Writes until grpc-js asks us to wait (backpressure), then resumes on 'drain'.
      function writeMore(): void {
        while (!settled && next < chunks.length) {
          const ready = call.write(chunks[next++] as TrainChunk);
          if (!ready) return;
        }
        if (!settled && next === chunks.length) {
          next += 1;
          call.end();
        }
      }
      call.on('drain', writeMore);
      call.on('error', () => {
        // Reported through the callback; the listener keeps the stream from throwing.
      });
      writeMore();
    });
  }

  /** Resolves once the channel is connected, or rejects with `unavailable` after `timeoutMs`. */
  waitForReady(timeoutMs = 10_000): Promise<void> {
    return new Promise((resolve, reject) => {
      this.grpcClient.waitForReady(Date.now() + timeoutMs, (error) => {
        if (error === undefined || error === null) resolve();
        else
          reject(
            new DressageError({
              code: 'unavailable',
              message: `The trainer at ${this.address} is unreachable: no connection within ${timeoutMs} ms`,
              details: { address: this.address },
              cause: error,
            }),
          );
      });
    });
  }

  /** Closes the channel. Calls in flight fail with `cancelled` or `unavailable`. */
  close(): void {
    this.grpcClient.close();
  }

  #unary<TRequest, TResponse>(
    method: string,
    fn: UnaryMethod<TRequest, TResponse>,
    request: TRequest,
    options: TrainerCallOptions,
  ): Promise<TResponse> {
    const context = { address: this.address, method };
    return new Promise<TResponse>((resolve, reject) => {
      if (options.signal?.aborted) {
        reject(cancelledBeforeStart(method, this.address));
        return;
      }
      const deadline = Date.now() + (options.deadlineMs ?? this.#deadlineMs);
      const call = fn.call(this.grpcClient, request, new Metadata(), { deadline }, (error, response) => {
        options.signal?.removeEventListener('abort', onAbort);
        if (error) reject(errorFromGrpc(error, context));
        else resolve(response);
      });
      const onAbort = () => call.cancel();
      options.signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

function cancelledBeforeStart(method: string, address: string): DressageError {
  return new DressageError({
    code: 'cancelled',
    message: `${method} on the trainer at ${address} was cancelled before it started`,
    details: { address, method },
  });
}

/** Creates a {@link TrainerClient} for `address` (`host:port`). */
export function createTrainerClient(address: string, options: TrainerClientOptions = {}): TrainerClient {
  return new TrainerClient(address, options);
}
