import {
  DressageError,
  type GetInfoRequest,
  GetInfoResponse,
  type HealthRequest,
  HealthResponse,
  HealthStatus,
  type LoadCheckpointRequest,
  LoadCheckpointResponse,
  type PackedTrainBatch,
  type SaveCheckpointRequest,
  SaveCheckpointResponse,
  type TrainBatchHeader,
  type TrainChunk,
  type TrainerServiceServer,
  TrainResponse,
  type UpdateWeightsRequest,
  UpdateWeightsResponse,
} from '@dressage/protocol';
import { TrainBatchAssembler } from '@dressage/protocol/internal';
import {
  type ChannelOptions,
  Server,
  type ServerCredentials,
  ServerCredentials as ServerCredentialsFactory,
  type ServerReadableStream,
  type ServerUnaryCall,
  type sendUnaryData,
} from '@grpc/grpc-js';
import { errorToGrpcStatus } from './grpc-errors.js';
import {
  checkFlowControlWindow,
  DEFAULT_FLOW_CONTROL_WINDOW_BYTES,
  DEFAULT_MAX_MESSAGE_BYTES,
  messageLimitOptions,
  widenServerFlowControlWindow,
} from './grpc-limits.js';
import { trainChunkDecodeError, trainerServiceDefinition } from './train-chunk-codec.js';

type Awaitable<T> = T | Promise<T>;

/**
 * What a trainer implements; the server helper does the rest (stream reassembly and validation,
 * limits, deadlines, cancellation, error mapping). Each method receives an AbortSignal that fires when
 * the client cancels or the call's deadline passes. Throw a DressageError to answer with its code.
 */
export interface TrainerImplementation {
  getInfo(signal: AbortSignal): Awaitable<Partial<GetInfoResponse>>;
  /** Trains on one complete, validated batch. `batch_id` and `rollout_id` default to the header's. */
  train(
    header: TrainBatchHeader,
    batch: PackedTrainBatch,
    signal: AbortSignal,
  ): Awaitable<Partial<TrainResponse>>;
  updateWeights(
    request: UpdateWeightsRequest,
    signal: AbortSignal,
  ): Awaitable<Partial<UpdateWeightsResponse>>;
  saveCheckpoint(
    request: SaveCheckpointRequest,
    signal: AbortSignal,
  ): Awaitable<Partial<SaveCheckpointResponse>>;
  loadCheckpoint(
    request: LoadCheckpointRequest,
    signal: AbortSignal,
  ): Awaitable<Partial<LoadCheckpointResponse>>;
  /** Optional: by default the server answers SERVING, or BUSY while a Train or UpdateWeights call runs. */
  health?(signal: AbortSignal): Awaitable<Partial<HealthResponse>>;
}

/** Limits and settings of {@link createTrainerServiceHandlers} and {@link startTrainerServer}. */
export interface TrainerServerOptions {
  /** Largest message received or sent. Default 64 MiB; match the clients'. */
  maxMessageBytes?: number;
  /** Largest batch, in tokens, a Train call may announce. Default 2^31 − 1 (the int32 offset range). */
  maxBatchTokens?: number;
  /** Largest batch, in samples. Default 2^31 − 1. */
  maxBatchSamples?: number;
  /** Receives one line per rejected or failed call. */
  log?: (message: string) => void;
}

const INT32_MAX = 2 ** 31 - 1;

// One AbortController per call, fired by client cancellation or by the call's deadline.
function callSignal(call: {
  on(event: 'cancelled', listener: () => void): unknown;
  getDeadline(): Date | number;
}): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  call.on('cancelled', () =>
    controller.abort(new DressageError({ code: 'cancelled', message: 'the client cancelled the call' })),
  );
  const deadline = call.getDeadline();
  const at = deadline instanceof Date ? deadline.getTime() : deadline;
  let timer: NodeJS.Timeout | undefined;
  if (Number.isFinite(at)) {
    timer = setTimeout(
      () =>
        controller.abort(
          new DressageError({ code: 'deadline_exceeded', message: 'the call passed its deadline' }),
        ),
      Math.max(0, at - Date.now()),
    );
    timer.unref();
  }
  return { signal: controller.signal, dispose: () => clearTimeout(timer) };
}

/**
 * grpc-js handlers of TrainerService over any {@link TrainerImplementation}, for a server you own:
 * `server.addService(trainerServiceDefinition, createTrainerServiceHandlers(trainer))`.
 */
export function createTrainerServiceHandlers(
  implementation: TrainerImplementation,
  options: TrainerServerOptions = {},
): TrainerServiceServer {
  const maxTokens = options.maxBatchTokens ?? INT32_MAX;
  const maxSamples = options.maxBatchSamples ?? INT32_MAX;
  let busy = 0;

  function fail<T>(method: string, callback: sendUnaryData<T>, error: unknown): void {
    const status = errorToGrpcStatus(error);
    options.log?.(`TrainerService ${method} failed: ${status.details}`);
    callback(status, null);
  }

  function unary<TRequest, TResponse>(
    method: string,
    run: (request: TRequest, signal: AbortSignal) => Awaitable<TResponse>,
    counts = false,
  ) {
    return (call: ServerUnaryCall<TRequest, TResponse>, callback: sendUnaryData<TResponse>): void => {
      const { signal, dispose } = callSignal(call);
      if (counts) busy += 1;
      Promise.resolve()
        .then(() => run(call.request, signal))
        .then(
          (response) => callback(null, response),
          (error: unknown) => fail(method, callback, error),
        )
        .finally(() => {
          if (counts) busy -= 1;
          dispose();
        });
    };
  }

  return {
    getInfo: unary('GetInfo', async (_request: GetInfoRequest, signal) =>
      GetInfoResponse.fromPartial(await implementation.getInfo(signal)),
    ),
    health: unary('Health', async (_request: HealthRequest, signal) => {
      if (implementation.health) return HealthResponse.fromPartial(await implementation.health(signal));
      return HealthResponse.fromPartial({
        status: busy > 0 ? HealthStatus.STATUS_BUSY : HealthStatus.STATUS_SERVING,
        message: busy > 0 ? 'training or updating weights' : 'serving',
      });
    }),
    updateWeights: unary(
      'UpdateWeights',
      async (request: UpdateWeightsRequest, signal) =>
        UpdateWeightsResponse.fromPartial(await implementation.updateWeights(request, signal)),
      true,
    ),
    saveCheckpoint: unary('SaveCheckpoint', async (request: SaveCheckpointRequest, signal) =>
      SaveCheckpointResponse.fromPartial(await implementation.saveCheckpoint(request, signal)),
    ),
    loadCheckpoint: unary('LoadCheckpoint', async (request: LoadCheckpointRequest, signal) =>
      LoadCheckpointResponse.fromPartial(await implementation.loadCheckpoint(request, signal)),
    ),
    train: (
      call: ServerReadableStream<TrainChunk, TrainResponse>,
      callback: sendUnaryData<TrainResponse>,
    ) => {
      const { signal, dispose } = callSignal(call);
      // decodeTrainChunk hands out views into the message grpc-js received and then dropped: the
      // assembler owns them, and keeps the columns of a single-block batch in place.
      const assembler = new TrainBatchAssembler({ adoptBlockBytes: true });
      let done = false;
      busy += 1;
      const finish = (error: unknown, response?: TrainResponse) => {
        if (done) return;
        done = true;
        busy -= 1;
        dispose();
        if (error === null) callback(null, response as TrainResponse);
        else fail('Train', callback, error);
      };
      call.on('data', (chunk: TrainChunk) => {
        if (done) return;
        try {
          const decodeError = trainChunkDecodeError(chunk);
          if (decodeError !== undefined) throw decodeError;
          // The limits first: a batch over them is refused before any of it is buffered.
          if (chunk.payload?.$case === 'header') checkHeader(chunk.payload.value, maxTokens, maxSamples);
          assembler.push(chunk);
        } catch (error) {
          // Answer at once: the client stops streaming the rest of a batch that is already rejected.
          finish(error);
        }
      });
      call.on('error', (error) => finish(error));
      signal.addEventListener('abort', () => finish(signal.reason), { once: true });
      call.on('end', () => {
        if (done) return;
        let assembled: { header: TrainBatchHeader; batch: PackedTrainBatch };
        try {
          assembled = assembler.finish();
        } catch (error) {
          finish(error);
          return;
        }
        const { header, batch } = assembled;
        Promise.resolve()
          .then(() => implementation.train(header, batch, signal))
          .then(
            (result) =>
              finish(
                null,
                TrainResponse.fromPartial({
                  batch_id: header.batch_id,
                  rollout_id: header.rollout_id,
                  ...result,
                }),
              ),
            (error: unknown) => finish(error),
          );
      });
    },
  };
}

function checkHeader(header: TrainBatchHeader, maxTokens: number, maxSamples: number): void {
  if (header.token_count > maxTokens || header.sample_count > maxSamples) {
    throw new DressageError({
      code: 'resource_exhausted',
      message: `batch ${header.batch_id || '(no id)'} announces ${header.sample_count} samples / ${header.token_count} tokens; this trainer accepts at most ${maxSamples} / ${maxTokens}`,
      details: {
        batch_id: header.batch_id,
        sample_count: header.sample_count,
        token_count: header.token_count,
        max_batch_samples: maxSamples,
        max_batch_tokens: maxTokens,
      },
    });
  }
}

/** A running TrainerService server. */
export interface RunningTrainerServer {
  readonly server: Server;
  /** The bound port (useful with port 0). */
  readonly port: number;
  /** `host:port` to give clients. */
  readonly address: string;
  /** Stops accepting calls, waits up to `graceMs` for calls in flight, then cancels the rest. */
  close(graceMs?: number): Promise<void>;
}

/** Options of {@link startTrainerServer}. */
export interface StartTrainerServerOptions extends TrainerServerOptions {
  /** Default `127.0.0.1:0` (loopback, any free port). */
  address?: string;
  /** Default insecure. */
  credentials?: ServerCredentials;
  /** Extra grpc-js server options. */
  channelOptions?: ChannelOptions;
  /**
   * HTTP/2 receive window granted to each connection and stream (see
   * {@link widenServerFlowControlWindow}). Default 8 MiB; `null` keeps HTTP/2's 64 KiB.
   */
  flowControlWindowBytes?: number | null;
}

/**
 * Starts a gRPC server serving TrainerService over `implementation`, with raised message limits.
 *
 * @example
 * ```ts
 * const server = await startTrainerServer({ getInfo, train, updateWeights, saveCheckpoint, loadCheckpoint });
 * const client = createTrainerClient(server.address);
 * ```
 */
export async function startTrainerServer(
  implementation: TrainerImplementation,
  options: StartTrainerServerOptions = {},
): Promise<RunningTrainerServer> {
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const windowBytes =
    options.flowControlWindowBytes === undefined
      ? DEFAULT_FLOW_CONTROL_WINDOW_BYTES
      : options.flowControlWindowBytes;
  if (windowBytes !== null) checkFlowControlWindow(windowBytes);
  const server = new Server({ ...messageLimitOptions(maxMessageBytes), ...options.channelOptions });
  server.addService(trainerServiceDefinition, createTrainerServiceHandlers(implementation, options));
  const requested = options.address ?? '127.0.0.1:0';
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(
      requested,
      options.credentials ?? ServerCredentialsFactory.createInsecure(),
      (error, bound) => {
        if (error) {
          reject(
            new DressageError({
              code: 'unavailable',
              message: `TrainerService could not listen on ${requested}: ${error.message}`,
              details: { address: requested },
              cause: error,
            }),
          );
        } else resolve(bound);
      },
    );
  });
  // Large Train uploads stall on HTTP/2's 64 KiB default window (every connection from now on).
  if (windowBytes !== null) widenServerFlowControlWindow(server, windowBytes);
  const host = requested.slice(0, requested.lastIndexOf(':')) || '127.0.0.1';
  return {
    server,
    port,
    address: `${host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host}:${port}`,
    close: (graceMs = 5_000) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, graceMs);
        timer.unref();
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}
