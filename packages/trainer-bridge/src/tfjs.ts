// The TensorFlow.js half of @dressage/trainer-bridge: slime's policy loss on tensors and the choice
// of the fastest tfjs backend. Importing this entry loads @tensorflow/tfjs; the main entry never does.

export {
  type BackendCandidate,
  backendCandidates,
  nativeAddonPresent,
  nativeBackendPackages,
  type SelectBackendOptions,
  type SelectedBackend,
  selectBackend,
} from './backend.js';
export {
  broadcastRewards,
  clipGradientsByGlobalNorm,
  type PerTokenInput,
  type PolicyLossGradients,
  type PolicyLossInputs,
  type PolicyLossTensors,
  policyLoss,
  policyLossGradients,
  reducerWeights,
} from './policy-loss.js';
