// Building blocks of @dressage/trainer-bridge for code that implements or tests the trainer side
// itself: the Train stream's gRPC codec and service definitions, gRPC error mapping and message
// limits, the service handlers, conversion and loss helpers, and synthetic batches. Not covered by
// the package's compatibility promise.

export { assignRolloutIds, computeRolloutMaskSums } from './convert.js';
export {
  type CallContext,
  ERROR_DETAILS_METADATA_KEY,
  errorCodeOfGrpcStatus,
  errorFromGrpc,
  errorToGrpcStatus,
} from './grpc-errors.js';
export {
  DEFAULT_FLOW_CONTROL_WINDOW_BYTES,
  DEFAULT_MAX_CHUNK_BYTES,
  DEFAULT_MAX_MESSAGE_BYTES,
  messageLimitOptions,
  widenServerFlowControlWindow,
} from './grpc-limits.js';
export { checkDenominator, effectiveGlobalBatchSize, responseTokenCount } from './policy-loss-options.js';
export { approximateKl, referenceReducer } from './policy-loss-reference.js';
export { STANDARD_DEVIATION_EPSILON } from './reward-post-process.js';
export { createSyntheticTrainBatch, type SyntheticTrainBatchOptions } from './synthetic-batch.js';
export {
  decodeTrainChunk,
  directlyFramedTrainerServiceDefinition,
  encodeTrainChunk,
  trainerServiceDefinition,
} from './train-chunk-codec.js';
export { createTrainerServiceHandlers } from './trainer-server.js';
export {
  dividesByStandardDeviation,
  normalizesRewards,
  usesPromptEqualDenominators,
} from './training-options.js';
