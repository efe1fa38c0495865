// Public surface of @dressage/reward-registry: named reward functions, their modules and the
// dispatcher that scores samples with them.

export {
  builtinRewards,
  constantReward,
  containsLabelReward,
  exactMatchReward,
  metadataScoreReward,
} from './builtins.js';
export { describeSample } from './describe-sample.js';
export { type ComputeRewardOptions, computeReward, computeRewards, dispatchRewards } from './dispatch.js';
export {
  defaultRewardRegistry,
  getRewardFunction,
  type LoadModulesOptions,
  loadRewardModules,
  parseRewardModuleList,
  REWARD_MODULES_ENVIRONMENT_VARIABLE,
  type RewardContext,
  type RewardFunction,
  type RewardModule,
  RewardRegistry,
  type RewardRegistryOptions,
  registerReward,
} from './registry.js';
export { type RewardValue, readRewardValue, requireRewardNumber } from './reward-value.js';
