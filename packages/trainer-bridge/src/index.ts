// Public surface of @dressage/trainer-bridge (first part): reward post-processing and the
// conversion of samples into slime's train_data, plain or packed.

export {
  assignRolloutIds,
  type ConvertOptions,
  computeRolloutMaskSums,
  convertSamplesToPackedTrainBatch,
  convertSamplesToTrainData,
} from './convert.js';
export {
  type PostProcessedRewards,
  rewardPostProcess,
  STANDARD_DEVIATION_EPSILON,
} from './reward-post-process.js';
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
