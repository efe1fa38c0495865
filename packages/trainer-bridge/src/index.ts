// Public surface of @dressage/trainer-bridge: reward post-processing, conversion of samples into
// slime's train_data (plain or packed), the TrainerService gRPC client and server, and the policy
// loss's options and float64 reference. Nothing here loads TensorFlow.js: the policy loss on tensors
// and backend selection are in `@dressage/trainer-bridge/tfjs`, so the cluster path (gRPC client,
// conversion) starts without the tfjs backends.

export {
  assignRolloutIds,
  type ConvertOptions,
  computeRolloutMaskSums,
  convertSamplesToPackedTrainBatch,
  convertSamplesToTrainData,
} from './convert.js';
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
export {
  checkDenominator,
  effectiveGlobalBatchSize,
  type KlLossType,
  type PolicyLossBatch,
  type PolicyLossMetricName,
  type PolicyLossOptions,
  policyLossOptionsFromLossConfig,
  type ResolvedPolicyLossOptions,
  resolvePolicyLossOptions,
  responseTokenCount,
} from './policy-loss-options.js';
export {
  approximateKl,
  type PolicyLossReferenceInputs,
  type PolicyLossValues,
  policyLossReference,
  referenceReducer,
} from './policy-loss-reference.js';
export {
  type PostProcessedRewards,
  rewardPostProcess,
  STANDARD_DEVIATION_EPSILON,
} from './reward-post-process.js';
export { createSyntheticTrainBatch, type SyntheticTrainBatchOptions } from './synthetic-batch.js';
export {
  decodeTrainChunk,
  directlyFramedTrainerServiceDefinition,
  encodeTrainChunk,
  trainerServiceDefinition,
} from './train-chunk-codec.js';
export {
  createTrainerClient,
  type TrainerCallOptions,
  TrainerClient,
  type TrainerClientOptions,
  type TrainHeaderInput,
  type TrainOptions,
} from './trainer-client.js';
export {
  createTrainerServiceHandlers,
  type RunningTrainerServer,
  type StartTrainerServerOptions,
  startTrainerServer,
  type TrainerImplementation,
  type TrainerServerOptions,
} from './trainer-server.js';
export {
  type AdvantageEstimator,
  advantageEstimators,
  dividesByStandardDeviation,
  normalizesRewards,
  type ResolvedTrainingOptions,
  resolveTrainingOptions,
  type TrainingOptions,
  trainingDefaults,
  usesPromptEqualDenominators,
} from './training-options.js';
