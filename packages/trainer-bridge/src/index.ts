// Public surface of @dressage/trainer-bridge: reward post-processing, conversion of samples into
// slime's train_data (plain or packed), the TrainerService gRPC client and server, and the policy
// loss's options and float64 reference. Nothing here loads TensorFlow.js: the policy loss on tensors
// and backend selection are in `@dressage/trainer-bridge/tfjs`, so the cluster path (gRPC client,
// conversion) starts without the tfjs backends. The parts these are built from (the Train stream's
// gRPC codec and service definitions, gRPC error mapping and message limits, conversion and loss
// helpers, synthetic batches) are in `@dressage/trainer-bridge/internal`.

export {
  type ConvertOptions,
  convertSamplesToPackedTrainBatch,
  convertSamplesToTrainData,
} from './convert.js';
export {
  checkGradientSpikeFactor,
  GRADIENT_SPIKE_MIN_HISTORY,
  GRADIENT_SPIKE_WINDOW,
  GradientSpikeClip,
} from './gradient-spike-clip.js';
export {
  type KlLossType,
  type PolicyLossBatch,
  type PolicyLossMetricName,
  type PolicyLossOptions,
  policyLossOptionsFromLossConfig,
  type ResolvedPolicyLossOptions,
  resolvePolicyLossOptions,
} from './policy-loss-options.js';
export {
  type PolicyLossReferenceInputs,
  type PolicyLossValues,
  policyLossReference,
} from './policy-loss-reference.js';
export { type PostProcessedRewards, rewardPostProcess } from './reward-post-process.js';
export {
  createTrainerClient,
  type TrainerCallOptions,
  TrainerClient,
  type TrainerClientOptions,
  type TrainHeaderInput,
  type TrainOptions,
} from './trainer-client.js';
export {
  type RunningTrainerServer,
  type StartTrainerServerOptions,
  startTrainerServer,
  type TrainerImplementation,
  type TrainerServerOptions,
} from './trainer-server.js';
export {
  type AdvantageEstimator,
  advantageEstimators,
  type ResolvedTrainingOptions,
  resolveTrainingOptions,
  type TrainingOptions,
  trainingDefaults,
} from './training-options.js';
export { truncateSample } from './truncate-sample.js';
