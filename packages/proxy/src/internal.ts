// Building blocks of @dressage/proxy for code that embeds or tests parts of it: the command line's
// parser and usage, the engine client,
// the generation controller, the output parsers, the service behind the HTTP server, request bodies,
// pseudo-streaming, the trajectory store and the directory lock it takes. Not covered by the package's compatibility promise.

export { defaultRouterUrl, type ParsedArguments, parseProxyArguments, usage } from './config.js';
export { type DirectoryLock, type LockDirectoryOptions, lockDirectory } from './directory-lock.js';
export {
  type AbortOutcome,
  EngineClient,
  type EngineClientOptions,
  type EngineGenerateResult,
  type EngineWorker,
  type GenerateRequest,
  generateResultOf,
} from './engine-client.js';
export {
  type GenerationChunk,
  GenerationController,
  type GenerationControllerRequest,
  type GenerationOutput,
  type PauseRequest,
} from './generation-controller.js';
export { contextOverflowError, detailError, toHttpResponse } from './http-error.js';
export {
  type ExtractedToolCall,
  localToolCallParser,
  OutputParser,
  type OutputParserOptions,
  type ParsedOutput,
  parseHermesToolCalls,
  parseQwen35ToolCalls,
  pythonJson,
  splitReasoningLocal,
  stripTrailingSpecialTokens,
} from './parsers.js';
export {
  type CompletionOutcome,
  type ParsedChatRequest,
  ProxyService,
  type ProxyServiceOptions,
} from './proxy-service.js';
export {
  discardRequestSchema,
  finalizeRequestSchema,
  readRequestSchema,
  rolloutPauseRequestSchema,
  rolloutResumeRequestSchema,
} from './request-bodies.js';
export { createProxyHttpServer } from './server.js';
export {
  recordToSegment,
  type StoredBlock,
  type StoredTrajectory,
  type StoredTrajectoryRecord,
} from './store-records.js';
export { completionToFrames } from './streaming.js';
export {
  type StoreFsyncPolicy,
  type StoreLogFile,
  type StoreRecovery,
  type StoreStats,
  TrajectoryStore,
  type TrajectoryStoreOptions,
} from './trajectory-store.js';
