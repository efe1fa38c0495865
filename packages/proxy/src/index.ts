// Public surface of @dressage/proxy: the server and its configuration, the rollout-side client,
// and the building blocks other packages embed (engine client, controller, parsers, store).

export {
  createProxyConfig,
  defaultRouterUrl,
  type ParseBackend,
  type ParsedArguments,
  type ProxyConfig,
  parseProxyArguments,
  type RoutedExpertsDtype,
  type TokenBuildMode,
  type TokenBuildModel,
  usage,
} from './config.js';
export {
  type AbortOutcome,
  EngineClient,
  type EngineClientOptions,
  type EngineWorker,
  type GenerateRequest,
  type GenerateResult,
  parseGenerateResponse,
} from './engine-client.js';
export {
  type GenerationChunk,
  GenerationController,
  type GenerationOutput,
  type GenerationRequest,
  type PauseRequest,
} from './generation-controller.js';
export { contextOverflowError, detailError, ProxyHttpError, toHttpResponse } from './http-error.js';
export {
  localToolCallParser,
  OutputParser,
  type OutputParserOptions,
  type ParsedOutput,
  type ParsedToolCall,
  parseHermesToolCalls,
  parseQwen35ToolCalls,
  pythonJson,
  splitReasoningLocal,
  stripTrailingSpecialTokens,
} from './parsers.js';
export {
  createPromptTokenizer,
  loadPromptRendering,
  loadPromptTokenizer,
  type PromptRendering,
  type PromptTokenizer,
} from './prompt-tokenizer.js';
export {
  type CompletionIds,
  ProxyClient,
  ProxyClientError,
  type ProxyClientOptions,
  type ReadTrajectoryOptions,
} from './proxy-client.js';
export {
  type CompletionOutcome,
  type ParsedChatRequest,
  ProxyService,
  type ProxyServiceOptions,
} from './proxy-service.js';
export {
  discardRequestSchema,
  finalizeRequestSchema,
  pauseRequestSchema,
  readRequestSchema,
  resumeRequestSchema,
} from './request-bodies.js';
export {
  createProxyHttpServer,
  type ProxyServer,
  type StartProxyOptions,
  startProxyServer,
} from './server.js';
export { type CompletionBody, completionToFrames } from './streaming.js';
export {
  loadToolCallHooks,
  TOOL_CALL_HOOK_FAILURES_KEY,
  type ToolCallHook,
  type ToolCallHookContext,
  type ToolCallHookFailure,
  type ToolCallHookStage,
  toolCallIdempotencyKey,
  validateToolCallHook,
} from './tool-call-hooks.js';
export {
  type StoredBlock,
  type StoredRecord,
  type StoredTrajectory,
  type StoreFsyncPolicy,
  type StoreLogFile,
  type StoreStats,
  TrajectoryStore,
  type TrajectoryStoreOptions,
} from './trajectory-store.js';
