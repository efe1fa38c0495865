// Public surface of @dressage/embedded: the embedded default's tiny causal LM, its inference engine
// and the SGLang-compatible HTTP server in front of it, checkpoints, and the trainer behind
// TrainerService. The parts these are built from (decode batches and caches, sampling math, the
// safetensors codec, request-body schemas, seeded randomness) are in `@dressage/embedded/internal`.

export {
  activeBackend,
  type BackendName,
  type BackendPreference,
  type InitializeBackendOptions,
  initializeBackend,
} from './backend.js';
export {
  type Checkpoint,
  loadCheckpoint,
  loadModel,
  loadWeightsFor,
  type SaveCheckpointOptions,
  saveCheckpoint,
} from './checkpoint.js';
export {
  ContextOverflowError,
  defaultSampling,
  type EngineFinishReason,
  type EngineStatistics,
  type GenerationRequest,
  type GenerationResult,
  type GenerationSampling,
  InferenceEngine,
  type InferenceEngineOptions,
  type PauseMode,
  type WeightUpdate,
} from './engine.js';
export { defaultEosTokenIds } from './engine-cli.js';
export { CausalLanguageModel, type NamedWeights } from './model.js';
export {
  defaultModelConfig,
  type Initialization,
  type ModelConfig,
  modelConfigSchema,
  type PositionEncoding,
  resolveModelConfig,
} from './model-config.js';
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
} from './trainer/embedded-trainer.js';
export {
  type EmbeddedTrainerServer,
  type EmbeddedTrainerServerOptions,
  startEmbeddedTrainerServer,
} from './trainer/trainer-server.js';
export {
  type BuildVocabularyOptions,
  buildVocabulary,
  type TokenEncoder,
  TokenVocabulary,
} from './vocabulary.js';
