// Public surface of @dressage/embedded: the embedded default's tiny causal LM, its inference engine
// and the SGLang-compatible HTTP server in front of it.

export {
  activeBackend,
  type BackendName,
  type BackendPreference,
  type InitializeBackendOptions,
  initializeBackend,
} from './backend.js';
export {
  type Checkpoint,
  checkpointManifestFile,
  checkpointSafetensorsFile,
  checkpointWeightsFile,
  loadCheckpoint,
  loadModel,
  loadWeightsFor,
  type SaveCheckpointOptions,
  saveCheckpoint,
  weightsEqual,
} from './checkpoint.js';
export {
  ContextOverflowError,
  defaultSampling,
  type EngineStatistics,
  type FinishReason,
  type GenerationRequest,
  type GenerationResult,
  type GenerationSampling,
  InferenceEngine,
  type InferenceEngineOptions,
  type PauseMode,
  type WeightUpdate,
} from './engine.js';
export { addedTokenIds, defaultEosTokenIds } from './engine-cli.js';
export {
  CausalLanguageModel,
  DecodeBatch,
  defaultPrefillChunkLength,
  disposeCache,
  type ForwardOptions,
  type NamedWeights,
  type ParameterSpec,
  type PreparedBatch,
  parameterSpecs,
  type SequenceCache,
  scaleLogits,
} from './model.js';
export {
  defaultModelConfig,
  type Initialization,
  type ModelConfig,
  modelConfigSchema,
  type PositionEncoding,
  resolveModelConfig,
} from './model-config.js';
export { hashSeed, SeededRandom } from './random.js';
export { decodeSafetensors, encodeSafetensors, type SafetensorsTensor } from './safetensors.js';
export {
  greedyTemperature,
  isGreedy,
  logprobTemperature,
  type SamplingSettings,
  sampleClass,
} from './sampling.js';
export {
  abortRequestSchema,
  type GenerateRequestBody,
  generateRequestSchema,
  pauseRequestSchema,
  samplingParamsSchema,
  updateWeightsRequestSchema,
} from './schemas.js';
export {
  type EngineServer,
  type EngineServerOptions,
  type ServerTokenizer,
  startEngineServer,
} from './server.js';
export {
  type SupervisedExample,
  type SupervisedStepResult,
  SupervisedTrainer,
  type SupervisedTrainerOptions,
} from './supervised-trainer.js';
export {
  type EmbeddedLossType,
  EmbeddedTrainer,
  type EmbeddedTrainerOptions,
  nextWeightVersion,
} from './trainer/embedded-trainer.js';
export {
  type EmbeddedTrainerServer,
  type EmbeddedTrainerServerOptions,
  startEmbeddedTrainerServer,
} from './trainer/trainer-server.js';
export { optimizerStateFile, trainerStateFile } from './trainer/trainer-state.js';
export {
  type BuildVocabularyOptions,
  buildVocabulary,
  type TokenEncoder,
  TokenVocabulary,
} from './vocabulary.js';
