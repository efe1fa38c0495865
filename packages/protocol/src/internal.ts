// Building blocks of @dressage/protocol for the packages that implement its formats: typed-array
// packing, the Train stream's chunk codec and assembler with the finite-value check, bearer and
// secret handling, loopback checks, and `sleep` and `Waiters` for code that waits. Not covered by
// the package's compatibility promise.

export { hostHeaderName, isLoopbackAddress, reachableHost } from './loopback.js';
export {
  bytesPerElement,
  concatTypedArrays,
  hostIsLittleEndian,
  type PackableArray,
  type PackedArrayByType,
  type PackedType,
  packTypedArray,
  toTypedArray,
  type UnpackOptions,
  unpackTypedArray,
} from './packing.js';
export { bearerMatches, readSecret, type SecretSources, secretsEqual } from './secrets.js';
export {
  type DamagedLine,
  readLines,
  type SerializedTrajectory,
  type StoreLine,
  storeLineProblem,
  storeLineSchema,
  storeLogName,
} from './store-log.js';
export {
  type ChunkOptions,
  TrainBatchAssembler,
  type TrainBatchAssemblerOptions,
  trainBatchFromChunks,
  trainBatchToChunks,
} from './train-batch-stream.js';
export { checkTrainBatchValues } from './train-batch-values.js';
export { type SleepOptions, sleep, Waiters, type WaitOptions } from './waiting.js';
