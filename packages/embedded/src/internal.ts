// Building blocks of @dressage/embedded for code that embeds or tests parts of the engine and
// trainer: the engine command line's token-id helpers, decode batches and sequence caches, the model's matrix products, parameter specs, sampling math, the safetensors
// codec, the engine server's request-body schemas, seeded randomness, checkpoint and trainer-state
// file names, and weight comparison. Not covered by the package's compatibility promise.

export {
  checkpointManifestFile,
  checkpointSafetensorsFile,
  checkpointWeightsFile,
  weightsEqual,
} from './checkpoint.js';
export { DecodeBatch } from './decode-batch.js';
export { differentiableProduct, type MatrixProduct, plainProduct } from './linear.js';
export {
  defaultPrefillChunkLength,
  type ForwardOptions,
  type ParameterSpec,
  type PreparedBatch,
  parameterSpecs,
  scaleLogits,
} from './model.js';
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
  pauseGenerationRequestSchema,
  samplingParamsSchema,
  updateWeightsRequestSchema,
} from './schemas.js';
export { disposeCache, type SequenceCache } from './sequence-cache.js';
export { nextWeightVersion } from './trainer/embedded-trainer.js';
export { optimizerStateFile, referenceStateFile, trainerStateFile } from './trainer/trainer-state.js';
export { addedTokenIds } from './vocabulary.js';
